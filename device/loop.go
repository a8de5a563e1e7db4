package device

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/device/alloctrack"
	"github.com/gpushare/nomad-gpushare/device/partition"
	dev "github.com/hashicorp/nomad/plugins/device"
)

// loopStopTimeout bounds how long a reconfiguration waits for the running
// loop to exit (it is stuck only when an NVML call hangs).
const loopStopTimeout = 30 * time.Second

// loopControl runs at most one loop goroutine. mu guards every field and
// is never taken by the loop itself, so holding it while waiting for the
// loop to exit is safe.
type loopControl struct {
	mu sync.Mutex
	// state is what the loop runs with; nil until configured.
	state *loopState
	// running is set while a loop is wanted (a stream started it).
	running bool
	// stop cancels the running loop; done is closed when it has exited.
	stop context.CancelFunc
	done chan struct{}
}

// loopState is what one configuration's loop works with. Only that loop's
// goroutine touches it (tests call its steps while no loop runs).
type loopState struct {
	cfg     settings
	tracker *alloctrack.Tracker
	machine *partition.Machine
	// blind is set while the Nomad API cannot be read; demandErr is the
	// last demand read error, "" once it works, "-" before the first read;
	// hidden is the last read's Hidden, "-" before the first read.
	blind     bool
	demandErr string
	hidden    string
	// foreign are the last read's Foreign, joined.
	foreign string
	// demandFrom is where the last read took its demand: "service" (the
	// quota service's published demand) or "nomad" (blocked
	// evaluations); "" before the first read.
	demandFrom string
	// mpsDown says why MPS does not isolate shares (mps_enabled without a
	// control daemon); "" when it does or is not enabled.
	mpsDown string
}

// start runs the plugin's loop once configured; the Fingerprint and Stats
// streams call it.
func (p *Plugin) start() error {
	p.loop.mu.Lock()
	defer p.loop.mu.Unlock()
	if p.disabled.Load() {
		return dev.ErrPluginDisabled
	}
	if p.loop.state == nil {
		return errors.New("gpushare plugin is not configured: SetConfig was not called")
	}
	if p.loop.running {
		return nil
	}
	if err := p.stopLoopLocked(); err != nil { // a loop that would not stop earlier
		return err
	}
	p.startLoopLocked()
	return nil
}

// startLoopLocked starts a loop on the current state. p.loop.mu must be
// held and no loop may be running.
func (p *Plugin) startLoopLocked() {
	ctx, cancel := context.WithCancel(p.ctx)
	done := make(chan struct{})
	st := p.loop.state
	go func() {
		defer close(done)
		p.run(ctx, st)
	}()
	p.loop.running, p.loop.stop, p.loop.done = true, cancel, done
}

// stopLoopLocked cancels the running loop and waits, at most
// loopStopTimeout, for it to exit. p.loop.mu must be held.
func (p *Plugin) stopLoopLocked() error {
	if p.loop.stop != nil {
		p.loop.stop()
		p.loop.stop = nil
	}
	p.loop.running = false
	if p.loop.done == nil {
		return nil
	}
	p.logger.Debug("waiting for the running loop to stop")
	select {
	case <-p.loop.done:
		p.loop.done = nil
		return nil
	case <-time.After(loopStopTimeout):
		return fmt.Errorf("the running loop did not stop within %s (an NVML or Nomad call hangs)", loopStopTimeout)
	}
}

// run is the loop: it reads the hardware every fingerprint period and
// Nomad every poll period, and publishes after each, and when an Xid error
// marks a GPU.
func (p *Plugin) run(ctx context.Context, st *loopState) {
	go p.tenancy.Monitor(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		st.tracker.Watch(ctx, alloctrack.WatchOptions{MinInterval: st.cfg.pollPeriod})
	}()
	defer func() { <-watched }() // a loop started again on this state watches anew
	p.refreshHardware(st)
	p.observe(ctx, st)
	fp := time.NewTicker(st.cfg.fingerprintPeriod)
	poll := time.NewTicker(st.cfg.pollPeriod)
	defer fp.Stop()
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-fp.C:
			p.refreshHardware(st)
		case <-poll.C:
			p.observe(ctx, st)
		case <-st.tracker.NodeChanged():
			// A switch waits for the servers to see a GPU withdrawn:
			// take their view at once rather than at the next poll.
			if st.machine.Withdrawing() {
				p.observe(ctx, st)
			}
		case <-p.hw.changed:
			p.publish(st)
		}
	}
}

// refreshHardware re-reads the GPUs and checks the MPS control daemon,
// and republishes.
func (p *Plugin) refreshHardware(st *loopState) {
	p.hw.refresh(st.cfg.fingerprintPeriod)
	p.checkMPS(st)
	p.publish(st)
}

// checkMPS probes the MPS control daemon when mps_enabled, logging when
// that changes: without it the share family is unhealthy.
func (p *Plugin) checkMPS(st *loopState) {
	if !st.cfg.MPSEnabled {
		return
	}
	down := ""
	if err := probeMPS(st.cfg.MPSPipeDirectory); err != nil {
		down = "gpushare: " + err.Error()
	}
	switch {
	case down != "" && down != st.mpsDown:
		p.logger.Error("MPS does not isolate shares: the share family is unhealthy", "reason", down)
	case down == "" && st.mpsDown != "":
		p.logger.Info("the MPS control daemon answers again: shares are offered", "pipe_directory", st.cfg.MPSPipeDirectory)
	}
	st.mpsDown = down
}

// observe reads holdings from Nomad, steps the partition machine and
// republishes. While Nomad cannot be read the machine is told so (blind)
// and switches nothing; while the read may leave allocations out it is
// told so too (Incomplete). The read is consistent while reservations wait
// to be accounted for (see holdings.update), and fresh while a switch waits
// on the time of the observations (partition.Machine.Settling); otherwise
// the tracker answers, without a request, from its blocking queries, which
// learn of every change at once, unless their view is older than
// watchedMaxAge. Observations stay once per poll period: reacting to each
// change at once would change which of two rules wins a race (a share
// tenant's guest placement at Reserve against the landing-place switch).
//
// While a GPU settles, the plugin first asks the servers whether every
// placement planned before they saw it withdrawn is applied
// (alloctrack.Tracker.PlansApplied), and then reads the allocations from
// the leader, so that the observation holds every such placement; a GPU
// that begins to settle is observed again at once for that proof.
func (p *Plugin) observe(ctx context.Context, st *loopState) {
	if p.observeOnce(ctx, st) {
		p.observeOnce(ctx, st)
	}
}

// observeOnce is one observation (see observe); it reports whether a GPU
// began to settle at a node index that no proof was asked for yet.
func (p *Plugin) observeOnce(ctx context.Context, st *loopState) bool {
	settle := st.machine.SettleIndex()
	var applied map[partition.Mode]uint64
	consistent := p.holdings.hasPending()
	if settle > 0 {
		a, err := st.tracker.PlansApplied(ctx, settle)
		switch {
		case err != nil:
			p.logger.Debug("cannot tell whether placements planned before a withdrawal are applied; the settle period applies", "error", err)
		default:
			applied, consistent = map[partition.Mode]uint64{}, true
			if a.Whole {
				applied[partition.Whole] = settle
			}
			if a.Share {
				applied[partition.Share] = settle
			}
			if a.Why != "" {
				p.logger.Debug("placements planned before a withdrawal may still be applied", "node_index", settle, "waiting", a.Why)
			}
		}
	}
	snap, err := st.tracker.Read(ctx, alloctrack.ReadOptions{Consistent: consistent, Fresh: st.machine.Settling(),
		MaxAge: watchedMaxAge(st.cfg.pollPeriod)})
	if err != nil && ctx.Err() != nil {
		return false
	}
	o := partition.Observation{At: p.now(), Applied: applied}
	if err != nil {
		p.noteBlind(st, err)
		p.holdings.failed(err)
		o.Blind = true
	} else {
		p.noteRead(st, snap)
		p.holdings.update(snap)
		p.tenancy.Update(snap.NodeID, snap.Tenants, snap.Started)
		o.At, o.Demand, o.Incomplete, o.NodeIndex = snap.Current, snap.Demand, snap.Hidden, snap.NodeIndex
	}
	o.GPUs = gpuObservations(p.hw.view(), p.holdings.current())
	markGuests(o.GPUs, p.tenancy.GuestsByHost())
	for _, e := range st.machine.Step(o) {
		p.logger.Info("partition", "uuid", e.UUID, "event", e.Msg)
	}
	p.publish(st)
	return st.machine.SettleIndex() > settle
}

// watchedMaxAge bounds how old the view the blocking queries keep may be
// before the loop reads the node itself: a query that does not answer a
// change (seen on real agents, cause unknown) hides it at most that long.
func watchedMaxAge(poll time.Duration) time.Duration { return 15 * poll }

// noteBlind logs a failed Nomad read (once, then at debug level).
func (p *Plugin) noteBlind(st *loopState, err error) {
	if !st.blind {
		p.logger.Error("cannot read GPU usage from the Nomad API; keeping the last known state and switching no GPU until it answers",
			"address", st.tracker.Address(), "error", err)
	} else {
		p.logger.Debug("Nomad API still unreachable", "error", err)
	}
	st.blind = true
}

// noteRead logs what changed with a successful Nomad read: reachable
// again, demand readable or not.
func (p *Plugin) noteRead(st *loopState, snap alloctrack.Snapshot) {
	if st.blind {
		p.logger.Info("Nomad API reachable again", "address", st.tracker.Address(), "node_id", snap.NodeID)
	}
	st.blind = false
	p.noteHidden(st, snap.Hidden)
	p.noteForeign(st, snap.Foreign)
	switch {
	case snap.DemandErr != nil && st.demandErr != snap.DemandErr.Error():
		p.logger.Warn("cannot read waiting GPU demand from the Nomad API; partitioning by usage alone until it answers", "error", snap.DemandErr)
		st.demandErr = snap.DemandErr.Error()
	case snap.DemandErr == nil && st.demandErr != "":
		p.logger.Info("reading waiting GPU demand from the Nomad API (blocked evaluations)")
		st.demandErr = ""
	}
	p.noteDemandSource(st, snap)
	if p.logger.IsTrace() {
		p.logger.Trace("usage", "snapshot", snap.String())
	}
}

// noteDemandSource logs, once per change, where the demand comes from.
func (p *Plugin) noteDemandSource(st *loopState, snap alloctrack.Snapshot) {
	from := "nomad"
	if snap.FromService {
		from = "service"
	}
	if from == st.demandFrom {
		return
	}
	if from == "service" {
		p.logger.Info("taking waiting GPU demand from the quota service's published demand; blocked evaluations are not listed while it is fresh")
	} else if st.demandFrom != "" || st.cfg.DemandVar != "" {
		p.logger.Info("the quota service's published demand is not fresh: listing blocked evaluations", "why", snap.Published.Why)
	}
	st.demandFrom = from
}

// noteHidden logs, once per change, whether the token sees every
// allocation, and what it lacks when it does not.
func (p *Plugin) noteHidden(st *loopState, hidden string) {
	switch {
	case hidden == st.hidden:
	case hidden != "":
		p.logger.Error("the plugin cannot prove that it sees every allocation on this node: it switches no GPU and refuses reservations outside the family a GPU is offered in", "reason", hidden)
	case st.hidden != "-":
		p.logger.Info("the plugin sees every allocation on this node again; switching resumes")
	}
	st.hidden = hidden
}

// noteForeign warns, once per change, when another plugin (HashiCorp's
// nvidia plugin) publishes nvidia device groups on this node: both offer
// the same GPUs, so Nomad can give one GPU twice, once through each.
func (p *Plugin) noteForeign(st *loopState, groups []string) {
	joined := strings.Join(groups, ", ")
	if joined == st.foreign {
		return
	}
	st.foreign = joined
	if joined != "" {
		p.logger.Warn("another device plugin publishes nvidia device groups on this node, probably HashiCorp's nvidia plugin: it offers the same GPUs, so Nomad can give a GPU through both at once; remove its plugin block (plugin \"nvidia-gpu\") and its binary from the client's plugin_dir",
			"groups", joined)
	}
}

// gpuObservations is what the partition machine is told about each GPU. A
// MIG-enabled GPU is left out: it is in neither family (its MIG devices
// are offered instead).
func gpuObservations(hw hwView, holdings map[string]*alloctrack.GPUHolding) map[string]partition.GPUObs {
	out := make(map[string]partition.GPUObs, len(hw.gpus))
	for _, h := range hw.gpus {
		if h.MIG {
			continue
		}
		g := partition.GPUObs{Order: h.Index, Healthy: h.healthy, Shareable: true}
		if u := holdings[h.UUID]; u != nil {
			g.WholeHeld = len(u.WholeAllocs) > 0
			g.ShareUnits = u.ShareUnits
			g.ServerWhole, g.ServerShare = u.ServerWhole, u.ServerShare
		}
		out[h.UUID] = g
	}
	return out
}

// markGuests counts, in the partition's observation, the guests each GPU
// hosts: a switch of a GPU completes only once its guests are gone.
func markGuests(obs map[string]partition.GPUObs, guests map[string]int) {
	for u, n := range guests {
		if g, ok := obs[u]; ok {
			g.Guests += n
			obs[u] = g
		}
	}
}

// publish rebuilds the device groups and the Reserve view from the
// hardware and the partition.
func (p *Plugin) publish(st *loopState) {
	hw := p.hw.view()
	pubs := st.machine.Publications()
	iso := shareIsolation{mps: st.cfg.MPSEnabled, down: st.mpsDown}
	groups := deviceGroups(hw, pubs, iso, st.cfg.SharesPerGPU, st.cfg.fingerprintPeriod)
	p.pub.set(groups, newReserveView(hw, pubs, iso, st.cfg))
	leaving := map[string]bool{}
	for u, pub := range pubs {
		if pub.LeavingWhole {
			leaving[u] = true
		}
	}
	p.tenancy.SetLeaving(leaving)
}
