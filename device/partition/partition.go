// Package partition decides, for each GPU of a node, whether it is published
// to Nomad as a whole GPU (device type "gpu") or as 100 shares (device type
// "gpu-share"). It is a pure state machine: it is fed observations (GPU
// health and holdings as read from the Nomad API, and what the Nomad servers
// currently see as published) and answers what to publish. It does no I/O
// and reads no clock. The protocol is stated in docs/design.md, section
// "Partition protocol"; units (a share is 1/vocab.UnitsPerGPU of a GPU) in
// "Units and device families".
//
// Rules:
//   - A GPU with share tenants stays in share mode until its last tenant
//     ends; a GPU held whole stays whole until it is freed. Observed
//     holdings always win over the machine's own plan, so a placement that
//     raced a switch aborts the switch.
//   - Idle GPUs move between the two families by a policy: keep
//     Policy.MinIdleShareGPUs idle GPUs in share mode as a landing place
//     while in-use share GPUs lack room (no in-use share GPU has
//     Policy.ShareHeadroom free shares); all other idle GPUs are whole.
//   - Waiting demand (Observation.Demand: device requests of allocations
//     that the scheduler could not place and that this node could serve)
//     overrides that split. Demand is served oldest first (Since, then
//     Key): a whole request takes idle GPUs for the whole family; a share
//     request first fits into the free shares of an in-use share GPU, then
//     of an idle GPU already opened for share demand, else opens an idle
//     GPU for the share family. The landing-place rule applies only to the
//     idle GPUs that demand leaves over. So a whole job never waits while
//     an idle GPU sits in share mode that no share demand needs, and a
//     share job never waits while an idle whole GPU is not needed by older
//     whole demand.
//   - Hysteresis: demand not seen in an observation is held for
//     Policy.DemandHold after it was last seen (an evaluation being retried
//     is briefly not blocked). Held demand only keeps GPUs where they are;
//     switches start only for the demand of the current observation. The
//     idle share-mode count moves up only below the lower of the two
//     targets and down only above the higher one.
//   - A switch is safe against placements in flight: the GPU is first
//     withdrawn from both families; once the Nomad servers' view of the
//     node shows it withdrawn (at node modify index W), the machine waits
//     until every placement planned before W is known to be applied
//     (Observation.Applied reaches W for the family the GPU leaves) or,
//     failing that proof, Policy.SettlePeriod, and then requires an
//     observation taken after that to show the GPU still unused before it
//     publishes the GPU in the other family.
//   - A GPU published nowhere yet (plugin start) settles the same way
//     before its first publication, since placements planned against the
//     previous plugin's publication may still be in flight.
//   - While blind (Nomad API unreachable) nothing is switched or published
//     anew; the last decisions stay.
//   - While the view is incomplete (Observation.Incomplete: allocations may
//     be hidden from the plugin's token) the holdings seen still win and what
//     the servers publish is adopted, but nothing is switched or published
//     anew: a GPU that looks idle may be held.
package partition

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/gpushare/nomad-gpushare/vocab"
)

// Mode is the family a GPU is published in.
type Mode uint8

const (
	// Unknown means no decision yet: the GPU is published in no family.
	Unknown Mode = iota
	// Whole publishes the GPU as one instance of type "gpu".
	Whole
	// Share publishes the GPU as share instances of type
	// "gpu-share".
	Share
)

// String returns the family as the sharing attribute names it
// (vocab.SharingWhole, vocab.SharingShare), or "unknown".
func (m Mode) String() string {
	switch m {
	case Whole:
		return vocab.SharingWhole
	case Share:
		return vocab.SharingShare
	default:
		return "unknown"
	}
}

// Policy tunes how idle GPUs are split between the families.
type Policy struct {
	// MinIdleShareGPUs idle GPUs are kept in share mode while in-use share
	// GPUs lack room.
	MinIdleShareGPUs int
	// ShareHeadroom: when some in-use share-mode GPU has at least this many
	// free shares, share mode has room and no idle GPU is kept for it.
	// 0 disables the test (idle share GPUs are always kept).
	ShareHeadroom int
	// SettlePeriod is how long to wait, after the Nomad servers see a GPU
	// withdrawn, for placements planned earlier to land.
	SettlePeriod time.Duration
	// DemandHold is how long demand that is no longer observed still
	// counts for keeping GPUs in their family (never for starting a
	// switch). 0 holds nothing.
	DemandHold time.Duration
}

// Demand is one device request of an allocation that waits to be placed
// and that this node could serve.
type Demand struct {
	// Key identifies the request across observations (for example
	// namespace/job/group/request#alloc).
	Key string
	// Since is when it began waiting: older demand is served first, ties
	// broken on Key.
	Since time.Time
	// Whole is the number of whole GPUs the request wants; Shares the
	// number of shares it wants on one GPU. Exactly one is positive.
	Whole, Shares int
}

func (d Demand) String() string {
	if d.Whole > 0 {
		return fmt.Sprintf("%s(%d whole)", d.Key, d.Whole)
	}
	return fmt.Sprintf("%s(%d shares)", d.Key, d.Shares)
}

// GPUObs is what is known about one GPU at the time of an observation.
type GPUObs struct {
	// Order sorts GPUs (the NVML index); ties break on UUID.
	Order int
	// Healthy is false when the GPU is missing or failing.
	Healthy bool
	// Shareable is false for GPUs that are never shared (MIG enabled).
	Shareable bool
	// WholeHeld: a live allocation holds the whole-GPU instance.
	WholeHeld bool
	// ShareUnits held by live allocations.
	ShareUnits int
	// ServerWhole and ServerShare: the Nomad servers' view of the node has
	// a healthy instance of this GPU in the whole / share family.
	ServerWhole, ServerShare bool
	// Guests counts the share tenants that the node-level scheduler runs
	// on this GPU away from their home: Nomad sees the GPU idle, but a
	// switch completes only once they are gone (the plugin moves them as
	// soon as the GPU is withdrawn).
	Guests int
}

func (g GPUObs) idle() bool { return !g.WholeHeld && g.ShareUnits == 0 }

// Observation is one reading of the node. At must be the time the reading
// began (before the allocations were listed).
type Observation struct {
	At time.Time
	// Blind is set when the Nomad API could not be read; the holdings and
	// server fields of GPUs are then ignored.
	Blind bool
	GPUs  map[string]GPUObs
	// Demand waiting for this node; ignored when Blind.
	Demand []Demand
	// Incomplete, when set, says why the holdings may leave allocations out
	// (the token cannot read every namespace); nothing is switched then.
	Incomplete string
	// NodeIndex is the modify index of the servers' view of the node in
	// this observation (0: unknown).
	NodeIndex uint64
	// Applied says, per family, below which index of the servers' state
	// every placement in that family on this node has been applied before
	// the holdings of this observation were read: no plan made from an
	// older state can still place an instance of the family here (0: not
	// known). It ends a settle before Policy.SettlePeriod.
	Applied map[Mode]uint64
}

// phase is where a GPU is in a switch.
type phase uint8

const (
	// phasePublished: the GPU is offered in its Mode's family.
	phasePublished phase = iota
	// phaseWithdrawing: withdrawn from every family; waiting for the Nomad
	// servers to see it.
	phaseWithdrawing
	// phaseSettling: the servers see it withdrawn since Since; waiting
	// SettlePeriod before confirming that nothing landed.
	phaseSettling
)

func (p phase) String() string {
	switch p {
	case phaseWithdrawing:
		return "withdrawing"
	case phaseSettling:
		return "settling"
	default:
		return "published"
	}
}

// gpuState is the machine's decision for one GPU.
type gpuState struct {
	Mode   Mode
	Phase  phase
	Target Mode      // the family being switched to (Phase != phasePublished)
	Since  time.Time // start of the settling phase
	// SinceIndex is the node modify index of the observation that started
	// the settling phase (0: unknown).
	SinceIndex uint64
	// Conflict is set when the GPU is observed both held whole and shared
	// (a placement raced a switch); it is then published nowhere until one
	// side ends.
	Conflict bool
}

// Publication tells the plugin where to publish a GPU.
type Publication struct {
	// Family is Whole or Share, or Unknown for "publish in neither".
	Family Mode
	// Reason explains an Unknown family, for the instances' HealthDesc.
	Reason string
	// LeavingWhole: the GPU is withdrawn on its way to the share family,
	// or because it is held both ways: a guest of the node-level
	// scheduler running there must move (docs/design.md, Partition
	// protocol, rule 10).
	LeavingWhole bool
}

// Machine is the partition state machine. The zero value is not usable;
// use New.
type Machine struct {
	policy Policy
	gpus   map[string]*gpuState
	obs    map[string]GPUObs
	seen   bool // at least one non-blind observation
	// incomplete is the last non-blind observation's Incomplete.
	incomplete string
	// demand is the demand of the last non-blind observation; held adds
	// the demand seen within Policy.DemandHold (by Key, with when it was
	// last seen).
	demand []Demand
	held   map[string]heldDemand
}

type heldDemand struct {
	d        Demand
	lastSeen time.Time
}

// New returns a machine that has seen nothing yet: every GPU it learns of is
// published nowhere until the first non-blind observation.
func New(p Policy) *Machine {
	return &Machine{policy: p, gpus: map[string]*gpuState{}, obs: map[string]GPUObs{}, held: map[string]heldDemand{}}
}

// Event records one decision of a Step, for logging.
type Event struct {
	UUID string
	Msg  string
}

// events collects a Step's events in the order of its decisions.
type events []Event

func (ev *events) add(uuid, format string, a ...any) {
	*ev = append(*ev, Event{UUID: uuid, Msg: fmt.Sprintf(format, a...)})
}

// Publications returns where each known GPU should be published.
func (m *Machine) Publications() map[string]Publication {
	out := make(map[string]Publication, len(m.gpus))
	for u, s := range m.gpus {
		out[u] = m.publication(s)
	}
	return out
}

// BlindReason starts the health description of a GPU not offered while
// the plugin's view of the node's allocations is incomplete. It is no
// withdrawal in the sense of vocab.IsWithdrawn: the GPU may stay out for as
// long as the plugin's token lacks rights, so the quota service does not
// count it.
const BlindReason = "gpushare: not offered while the plugin cannot see every allocation on this node: "

// publication is where GPU s is published; a GPU published nowhere says
// why in words vocab.IsWithdrawn recognises when it is withdrawn only to be
// moved or placed (the contract with the quota service), BlindReason
// otherwise.
func (m *Machine) publication(s *gpuState) Publication {
	unpublished := s.Mode == Unknown || s.Phase != phasePublished
	switch {
	case m.incomplete != "" && unpublished && !s.Conflict:
		return Publication{Reason: BlindReason + m.incomplete}
	case !m.seen || s.Mode == Unknown && s.Phase == phasePublished:
		return Publication{Reason: vocab.WithdrawnWaiting()}
	case s.Mode == Unknown && !s.Conflict:
		return Publication{Reason: vocab.WithdrawnSettling(s.Target.String()), LeavingWhole: s.Target == Share}
	case s.Conflict:
		return Publication{Reason: vocab.WithdrawnConflict(), LeavingWhole: true}
	case s.Phase != phasePublished:
		return Publication{Reason: vocab.WithdrawnSwitching(s.Target.String(), s.Phase.String()), LeavingWhole: s.Target == Share}
	}
	return Publication{Family: s.Mode}
}

// Settling reports whether a decision waits on the time of the next
// observations: a GPU is withdrawn or settling on its way to a family, or published
// in none yet, or nothing was observed yet. Such observations must be
// fresh reads: Observation.At is what the settle period is measured with.
func (m *Machine) Settling() bool {
	if !m.seen {
		return true
	}
	for _, s := range m.gpus {
		if s.Phase != phasePublished || s.Mode == Unknown {
			return true
		}
	}
	return false
}

// Step feeds one observation and returns what changed. The steps run in
// this order: observed holdings win; GPUs never decided adopt what the servers
// publish; switches in progress advance; the policy splits the idle GPUs.
// An incomplete observation stops after the adoption.
func (m *Machine) Step(o Observation) []Event {
	var ev events
	m.learnGPUs(o, &ev)
	if o.Blind {
		m.keepHardwareFacts(o)
		return ev
	}
	m.seen = true
	m.noteCompleteness(o, &ev)
	m.obs = make(map[string]GPUObs, len(o.GPUs))
	for u, g := range o.GPUs {
		m.obs[u] = g
	}
	m.holdDemand(o, &ev)
	uuids := m.sorted()
	m.followHoldings(uuids, &ev)
	m.adoptServerView(uuids, &ev)
	if m.incomplete != "" {
		return ev
	}
	m.advanceSwitches(o, uuids, &ev)
	m.balance(o, uuids, &ev)
	return ev
}

// learnGPUs starts tracking new GPUs and forgets vanished ones.
func (m *Machine) learnGPUs(o Observation, ev *events) {
	for u := range m.gpus {
		if _, ok := o.GPUs[u]; !ok {
			delete(m.gpus, u)
			delete(m.obs, u)
			ev.add(u, "forgotten: no longer observed")
		}
	}
	for u := range o.GPUs {
		if _, ok := m.gpus[u]; !ok {
			m.gpus[u] = &gpuState{}
		}
	}
}

// noteCompleteness records whether the observation's holdings are complete,
// with an event when that changes.
func (m *Machine) noteCompleteness(o Observation, ev *events) {
	switch {
	case o.Incomplete != "" && m.incomplete == "":
		ev.add("", "usage may be incomplete; no GPU switches until it is complete: %s", o.Incomplete)
	case o.Incomplete == "" && m.incomplete != "":
		ev.add("", "usage complete again; switching resumes")
	}
	m.incomplete = o.Incomplete
}

// keepHardwareFacts takes a blind observation's hardware facts but not its
// holdings: nothing switches blind.
func (m *Machine) keepHardwareFacts(o Observation) {
	for u, g := range o.GPUs {
		prev := m.obs[u]
		prev.Order, prev.Healthy, prev.Shareable = g.Order, g.Healthy, g.Shareable
		m.obs[u] = prev
	}
}

// holdDemand records the observation's demand and holds it for
// Policy.DemandHold after it was last seen.
func (m *Machine) holdDemand(o Observation, ev *events) {
	m.demand = append(m.demand[:0], o.Demand...)
	for _, d := range o.Demand {
		if _, ok := m.held[d.Key]; !ok {
			ev.add("", "demand waits: %s", d)
		}
		m.held[d.Key] = heldDemand{d: d, lastSeen: o.At}
	}
	for _, k := range slices.Sorted(maps.Keys(m.held)) {
		if h := m.held[k]; o.At.Sub(h.lastSeen) > m.policy.DemandHold {
			delete(m.held, k)
			ev.add("", "demand no longer waits: %s", h.d)
		}
	}
}

// followHoldings makes observed holdings win: a GPU held whole is whole, one with
// share tenants is shared (aborting any switch), one held both ways is a
// conflict published nowhere, and one that is never shared is whole.
func (m *Machine) followHoldings(uuids []string, ev *events) {
	for _, u := range uuids {
		g, s := m.obs[u], m.gpus[u]
		switch {
		case g.WholeHeld && g.ShareUnits > 0:
			if !s.Conflict {
				ev.add(u, "conflict: held whole and by %d shares; withdrawn", g.ShareUnits)
			}
			s.Conflict = true
			s.Phase = phasePublished
			continue
		case g.WholeHeld:
			m.force(u, s, Whole, "held whole by an allocation", ev)
		case g.ShareUnits > 0:
			m.force(u, s, Share, fmt.Sprintf("%d shares held", g.ShareUnits), ev)
		case !g.Shareable && (s.Mode != Whole || s.Phase != phasePublished):
			m.force(u, s, Whole, "not shareable", ev)
		}
		if s.Conflict {
			s.Conflict = false
			ev.add(u, "conflict resolved; %s", s.Mode)
		}
	}
}

// adoptServerView makes the first decision for GPUs never decided: what the
// servers already publish stands; a GPU published nowhere is left to
// balance; one published in both families is withdrawn and then assigned.
func (m *Machine) adoptServerView(uuids []string, ev *events) {
	for _, u := range uuids {
		g, s := m.obs[u], m.gpus[u]
		if s.Mode != Unknown || s.Phase != phasePublished {
			continue
		}
		switch {
		case g.ServerWhole && !g.ServerShare:
			s.Mode = Whole
			ev.add(u, "adopted whole mode from the servers' view")
		case g.ServerShare && !g.ServerWhole:
			s.Mode = Share
			ev.add(u, "adopted share mode from the servers' view")
		case g.ServerShare && g.ServerWhole:
			s.Phase, s.Target = phaseWithdrawing, Share
			ev.add(u, "published in both families; withdrawing")
		}
	}
}

// advanceSwitches moves switches in progress: a withdrawn GPU settles once
// the servers see it withdrawn, and is published in its target family once
// it has settled (settled) and is still unused.
func (m *Machine) advanceSwitches(o Observation, uuids []string, ev *events) {
	for _, u := range uuids {
		g, s := m.obs[u], m.gpus[u]
		switch s.Phase {
		case phaseWithdrawing:
			if !g.ServerWhole && !g.ServerShare {
				s.Phase, s.Since, s.SinceIndex = phaseSettling, o.At, o.NodeIndex
				ev.add(u, "servers see it withdrawn; settling")
			}
		case phaseSettling:
			if g.ServerWhole || g.ServerShare {
				// Republished by someone else (a stale fingerprint); wait again.
				s.Phase = phaseWithdrawing
				ev.add(u, "servers publish it again; withdrawing")
			} else if how := m.settled(o, s); how != "" && g.idle() && g.Guests == 0 {
				s.Mode, s.Phase = s.Target, phasePublished
				ev.add(u, "switched to %s mode (%s)", s.Mode, how)
			}
		}
	}
}

// settled says how a settling GPU has settled, "" while it has not: every
// placement planned before the servers saw it withdrawn is applied (the
// observation's Applied reaches SinceIndex for the family it leaves, both
// when it may have been published in either), or, failing that proof,
// Policy.SettlePeriod has passed since.
func (m *Machine) settled(o Observation, s *gpuState) string {
	proven := s.SinceIndex > 0
	for _, f := range []Mode{Whole, Share} {
		if s.Mode == Unknown || s.Mode == f {
			proven = proven && o.Applied[f] >= s.SinceIndex
		}
	}
	switch {
	case proven:
		return "placements planned before the withdrawal applied"
	case !o.At.Before(s.Since.Add(m.policy.SettlePeriod)):
		return "settle period passed"
	}
	return ""
}

// Withdrawing reports whether a GPU is withdrawn and waits for the Nomad
// servers to see it so.
func (m *Machine) Withdrawing() bool {
	for _, s := range m.gpus {
		if s.Phase == phaseWithdrawing {
			return true
		}
	}
	return false
}

// SettleIndex is the highest node modify index at which a GPU began to
// settle and that a proof (Observation.Applied) could end, 0 when no GPU
// settles: the plugin then checks, before its next read of the
// allocations, which plans made from an older state may still be applied.
func (m *Machine) SettleIndex() uint64 {
	var idx uint64
	for _, s := range m.gpus {
		if s.Phase == phaseSettling && !s.Conflict {
			idx = max(idx, s.SinceIndex)
		}
	}
	return idx
}

func (m *Machine) force(u string, s *gpuState, to Mode, why string, ev *events) {
	if s.Mode == to && s.Phase == phasePublished {
		return
	}
	if s.Phase != phasePublished {
		ev.add(u, "switch to %s aborted: %s", s.Target, why)
	} else {
		ev.add(u, "%s mode: %s", to, why)
	}
	s.Mode, s.Phase, s.Target = to, phasePublished, Unknown
}

// idleCensus is where the GPUs stand for the policy: the idle ones by mode,
// and the room left on the in-use share GPUs.
type idleCensus struct {
	// idleShare counts idle GPUs in share mode or switching to it.
	idleShare int
	// room is the most free shares of an in-use share GPU; free lists the
	// free shares of each, in GPU order.
	room int
	free []int
	// flex counts the idle shareable GPUs, fixed the idle GPUs that are
	// whole for good (not shareable).
	flex, fixed int
	// wholeCands and shareCands are the idle shareable GPUs published
	// whole / as shares, in GPU order; fresh those published nowhere yet.
	wholeCands, shareCands, fresh []string
}

// balance starts switches (and makes first assignments) so that the number
// of idle share-mode GPUs meets the policy and the waiting demand.
func (m *Machine) balance(o Observation, uuids []string, ev *events) {
	m.assignNeverShared(uuids, ev)
	c := m.census(uuids)
	lo, hi := m.shareTargets(c)
	m.assignFresh(o, &c, lo, hi, ev)
	m.switchIdle(&c, lo, hi, ev)
}

// assignNeverShared publishes whole the undecided GPUs that are unhealthy
// or never shared.
func (m *Machine) assignNeverShared(uuids []string, ev *events) {
	for _, u := range uuids {
		g, s := m.obs[u], m.gpus[u]
		if !s.Conflict && s.Mode == Unknown && s.Phase == phasePublished && (!g.Healthy || !g.Shareable) {
			s.Mode = Whole // published (unhealthy, or never shared) as whole
			ev.add(u, "assigned whole mode")
		}
	}
}

// census counts the GPUs by where they stand (conflicts left out).
func (m *Machine) census(uuids []string) idleCensus {
	var c idleCensus
	for _, u := range uuids {
		g, s := m.obs[u], m.gpus[u]
		if s.Conflict {
			continue
		}
		if s.Mode == Share && s.Phase == phasePublished && g.Healthy && g.ShareUnits > 0 {
			f := vocab.UnitsPerGPU - g.ShareUnits
			c.room = max(c.room, f)
			c.free = append(c.free, f)
		}
		if !g.idle() || !g.Healthy {
			continue
		}
		if !g.Shareable {
			c.fixed++ // an idle whole GPU that never moves
			continue
		}
		c.flex++
		switch {
		case s.Mode == Unknown && s.Phase == phaseSettling:
			// Never published yet: its target may still change.
			c.fresh = append(c.fresh, u)
		case s.Phase != phasePublished:
			if s.Target == Share {
				c.idleShare++
			}
		case s.Mode == Share:
			c.idleShare++
			c.shareCands = append(c.shareCands, u)
		case s.Mode == Whole && g.Guests > 0:
			// Switched last: a switch would move its guests.
			c.wholeCands = append([]string{u}, c.wholeCands...)
		case s.Mode == Whole:
			c.wholeCands = append(c.wholeCands, u)
		case s.Mode == Unknown:
			c.fresh = append(c.fresh, u)
		}
	}
	return c
}

// shareTargets is how many idle GPUs should be in share mode: lo for the
// current demand or the held demand, whichever wants fewer, hi for
// whichever wants more. Switches to share start only below lo and switches
// to whole only above hi (hysteresis).
func (m *Machine) shareTargets(c idleCensus) (lo, hi int) {
	base := m.policy.MinIdleShareGPUs
	if m.policy.ShareHeadroom > 0 && c.room >= m.policy.ShareHeadroom {
		base = 0
	}
	held := make([]Demand, 0, len(m.held))
	for _, k := range slices.Sorted(maps.Keys(m.held)) {
		held = append(held, m.held[k].d)
	}
	a := shareNeed(m.demand, c.free, c.flex, c.fixed, base)
	b := shareNeed(held, c.free, c.flex, c.fixed, base)
	return min(a, b), max(a, b)
}

// assignFresh gives the GPUs published nowhere their first family. A
// placement planned against an earlier publication (before a plugin
// restart) may still be in flight, so they settle like a switch before
// their first publication. The landing place comes from the
// highest-ordered end.
func (m *Machine) assignFresh(o Observation, c *idleCensus, lo, hi int, ev *events) {
	for i := len(c.fresh) - 1; i >= 0; i-- {
		u := c.fresh[i]
		s := m.gpus[u]
		want := lo
		if s.Phase != phasePublished && s.Target == Share {
			want = hi
		}
		target := Whole
		if c.idleShare < want {
			target = Share
			c.idleShare++
		}
		if s.Phase == phasePublished {
			s.Phase, s.Since, s.SinceIndex = phaseSettling, o.At, o.NodeIndex
		} else if s.Target == target {
			continue
		}
		s.Target = target
		ev.add(u, "assigning %s mode after settling", s.Target)
	}
}

// switchIdle withdraws idle published GPUs to switch them: whole ones to
// share (from the highest-ordered end) while fewer than lo idle GPUs are in
// share mode, share ones to whole (from the lowest) while more than hi are.
func (m *Machine) switchIdle(c *idleCensus, lo, hi int, ev *events) {
	for i := len(c.wholeCands) - 1; i >= 0 && c.idleShare < lo; i-- {
		u := c.wholeCands[i]
		s := m.gpus[u]
		s.Phase, s.Target = phaseWithdrawing, Share
		c.idleShare++
		ev.add(u, "switching whole -> share (%d idle share GPUs wanted): withdrawn", lo)
	}
	for i := 0; i < len(c.shareCands) && c.idleShare > hi; i++ {
		u := c.shareCands[i]
		s := m.gpus[u]
		s.Phase, s.Target = phaseWithdrawing, Whole
		c.idleShare--
		ev.add(u, "switching share -> whole (%d idle share GPUs wanted): withdrawn", hi)
	}
}

// shareNeed is how many of the flex idle shareable GPUs should be in share
// mode, given the waiting demand, the free shares of the in-use share GPUs,
// fixed idle GPUs that are whole for good (not shareable), and base, the
// landing places wanted without demand. Demand is served oldest first; a
// request that cannot be served whole is skipped (it takes nothing from
// younger demand that fits). The idle GPUs left over follow the
// landing-place rule.
func shareNeed(demand []Demand, free []int, flex, fixed, base int) int {
	ds := append([]Demand(nil), demand...)
	sort.Slice(ds, func(i, j int) bool {
		if !ds[i].Since.Equal(ds[j].Since) {
			return ds[i].Since.Before(ds[j].Since)
		}
		return ds[i].Key < ds[j].Key
	})
	free = append([]int(nil), free...)
	var opened []int // free shares of idle GPUs opened for share demand
	fit := func(bins []int, n int) bool {
		for i, f := range bins {
			if f >= n {
				bins[i] -= n
				return true
			}
		}
		return false
	}
	for _, d := range ds {
		switch {
		case d.Whole > 0:
			take := min(d.Whole, fixed)
			if rest := d.Whole - take; rest <= flex {
				fixed -= take
				flex -= rest
			}
		case d.Shares > 0 && d.Shares <= vocab.UnitsPerGPU:
			if fit(free, d.Shares) || fit(opened, d.Shares) || flex == 0 {
				continue
			}
			flex--
			opened = append(opened, vocab.UnitsPerGPU-d.Shares)
		}
	}
	n := len(opened)
	if n < base {
		n += min(flex, base-n)
	}
	return n
}

func (m *Machine) sorted() []string {
	out := make([]string, 0, len(m.gpus))
	for u := range m.gpus {
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := m.obs[out[i]], m.obs[out[j]]
		if a.Order != b.Order {
			return a.Order < b.Order
		}
		return out[i] < out[j]
	})
	return out
}
