// Package partition decides, for each GPU of a node, whether it is published
// to Nomad as a whole GPU (device type "gpu") or as 100 shares (device type
// "gpu-share"). It is a pure state machine: it is fed observations (GPU
// health and usage as read from the Nomad API, and what the Nomad servers
// currently see as published) and answers what to publish. It does no I/O
// and reads no clock.
//
// Rules:
//   - A GPU with share tenants stays in share mode until its last tenant
//     ends; a GPU held whole stays whole until it is freed. Observed usage
//     always wins over the machine's own plan, so a placement that raced a
//     switch aborts the switch.
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
//     node shows it withdrawn, the machine waits Policy.SettlePeriod and then
//     requires an observation taken after that period to show the GPU
//     still unused before it publishes the GPU in the other family.
//   - A GPU published nowhere yet (plugin start) settles the same way
//     before its first publication, since placements planned against the
//     previous plugin's publication may still be in flight.
//   - While blind (Nomad API unreachable) nothing is switched or published
//     anew; the last decisions stay.
package partition

import (
	"fmt"
	"sort"
	"time"

	"github.com/gpushare/nomad-gpushare/device/ids"
)

// Mode is the family a GPU is published in.
type Mode uint8

const (
	// Unknown means no decision yet: the GPU is published in no family.
	Unknown Mode = iota
	// Whole publishes the GPU as one instance of type "gpu".
	Whole
	// Share publishes the GPU as ids.SharesPerGPU instances of type
	// "gpu-share".
	Share
)

func (m Mode) String() string {
	switch m {
	case Whole:
		return "whole"
	case Share:
		return "share"
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
}

func (g GPUObs) idle() bool { return !g.WholeHeld && g.ShareUnits == 0 }

// Observation is one reading of the node. At must be the time the reading
// began (before the allocations were listed).
type Observation struct {
	At time.Time
	// Blind is set when the Nomad API could not be read; the usage and
	// server fields of GPUs are then ignored.
	Blind bool
	GPUs  map[string]GPUObs
	// Demand waiting for this node; ignored when Blind.
	Demand []Demand
}

// Phase is where a GPU is in a switch.
type Phase uint8

const (
	// Published: the GPU is offered in its Mode's family.
	Published Phase = iota
	// Withdrawing: withdrawn from every family; waiting for the Nomad
	// servers to see it.
	Withdrawing
	// Settling: the servers see it withdrawn since Since; waiting
	// SettlePeriod before confirming that nothing landed.
	Settling
)

func (p Phase) String() string {
	switch p {
	case Withdrawing:
		return "withdrawing"
	case Settling:
		return "settling"
	default:
		return "published"
	}
}

// GPUState is the machine's decision for one GPU.
type GPUState struct {
	Mode   Mode
	Phase  Phase
	Target Mode      // the family being switched to (Phase != Published)
	Since  time.Time // start of the Settling phase
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
}

// Machine is the partition state machine. The zero value is not usable;
// use New.
type Machine struct {
	policy Policy
	gpus   map[string]*GPUState
	obs    map[string]GPUObs
	seen   bool // at least one non-blind observation
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
	return &Machine{policy: p, gpus: map[string]*GPUState{}, obs: map[string]GPUObs{}, held: map[string]heldDemand{}}
}

// SetPolicy changes the policy; it applies from the next Step.
func (m *Machine) SetPolicy(p Policy) { m.policy = p }

// Event records one decision of a Step, for logging.
type Event struct {
	UUID string
	Msg  string
}

// State returns a copy of the state of a GPU.
func (m *Machine) State(uuid string) (GPUState, bool) {
	s, ok := m.gpus[uuid]
	if !ok {
		return GPUState{}, false
	}
	return *s, true
}

// Publications returns where each known GPU should be published.
func (m *Machine) Publications() map[string]Publication {
	out := make(map[string]Publication, len(m.gpus))
	for u, s := range m.gpus {
		out[u] = m.publication(s)
	}
	return out
}

func (m *Machine) publication(s *GPUState) Publication {
	switch {
	case !m.seen || s.Mode == Unknown && s.Phase == Published:
		return Publication{Reason: "gpushare: waiting to read GPU usage from the Nomad API"}
	case s.Mode == Unknown && !s.Conflict:
		return Publication{Reason: fmt.Sprintf("gpushare: settling before first publication in %s mode", s.Target)}
	case s.Conflict:
		return Publication{Reason: "gpushare: GPU is held both whole and shared; withdrawn until one side ends"}
	case s.Phase != Published:
		return Publication{Reason: fmt.Sprintf("gpushare: switching to %s mode (%s)", s.Target, s.Phase)}
	}
	return Publication{Family: s.Mode}
}

// Step feeds one observation and returns what changed.
func (m *Machine) Step(o Observation) []Event {
	var ev []Event
	add := func(u, f string, a ...any) { ev = append(ev, Event{UUID: u, Msg: fmt.Sprintf(f, a...)}) }

	// Learn new GPUs and forget vanished ones.
	for u := range m.gpus {
		if _, ok := o.GPUs[u]; !ok {
			delete(m.gpus, u)
			delete(m.obs, u)
			add(u, "forgotten: no longer observed")
		}
	}
	for u := range o.GPUs {
		if _, ok := m.gpus[u]; !ok {
			m.gpus[u] = &GPUState{}
		}
	}
	if o.Blind {
		// Keep the hardware facts, but not usage: nothing switches blind.
		for u, g := range o.GPUs {
			prev := m.obs[u]
			prev.Order, prev.Healthy, prev.Shareable = g.Order, g.Healthy, g.Shareable
			m.obs[u] = prev
		}
		return ev
	}
	m.seen = true
	m.obs = make(map[string]GPUObs, len(o.GPUs))
	for u, g := range o.GPUs {
		m.obs[u] = g
	}
	m.demand = append(m.demand[:0], o.Demand...)
	for _, d := range o.Demand {
		if _, ok := m.held[d.Key]; !ok {
			add("", "demand waits: %s", d)
		}
		m.held[d.Key] = heldDemand{d: d, lastSeen: o.At}
	}
	for _, k := range sortedKeys(m.held) {
		if h := m.held[k]; o.At.Sub(h.lastSeen) > m.policy.DemandHold {
			delete(m.held, k)
			add("", "demand no longer waits: %s", h.d)
		}
	}

	uuids := m.sorted()

	// 1. Observed usage wins.
	for _, u := range uuids {
		g, s := m.obs[u], m.gpus[u]
		switch {
		case g.WholeHeld && g.ShareUnits > 0:
			if !s.Conflict {
				add(u, "conflict: held whole and by %d shares; withdrawn", g.ShareUnits)
			}
			s.Conflict = true
			s.Phase = Published
			continue
		case g.WholeHeld:
			m.force(u, s, Whole, "held whole by an allocation", add)
		case g.ShareUnits > 0:
			m.force(u, s, Share, fmt.Sprintf("%d shares held", g.ShareUnits), add)
		case !g.Shareable && (s.Mode != Whole || s.Phase != Published):
			m.force(u, s, Whole, "not shareable", add)
		}
		if s.Conflict {
			s.Conflict = false
			add(u, "conflict resolved; %s", s.Mode)
		}
	}

	// 2. First decision for GPUs never decided: what the servers already
	// publish stands; a GPU published nowhere may be given a family at once;
	// one published in both is withdrawn and then assigned.
	for _, u := range uuids {
		g, s := m.obs[u], m.gpus[u]
		if s.Mode != Unknown || s.Phase != Published {
			continue
		}
		switch {
		case g.ServerWhole && !g.ServerShare:
			s.Mode = Whole
			add(u, "adopted whole mode from the servers' view")
		case g.ServerShare && !g.ServerWhole:
			s.Mode = Share
			add(u, "adopted share mode from the servers' view")
		case g.ServerShare && g.ServerWhole:
			s.Phase, s.Target = Withdrawing, Share
			add(u, "published in both families; withdrawing")
		}
	}

	// 3. Advance switches in progress.
	for _, u := range uuids {
		g, s := m.obs[u], m.gpus[u]
		switch s.Phase {
		case Withdrawing:
			if !g.ServerWhole && !g.ServerShare {
				s.Phase, s.Since = Settling, o.At
				add(u, "servers see it withdrawn; settling")
			}
		case Settling:
			if g.ServerWhole || g.ServerShare {
				// Republished by someone else (a stale fingerprint); wait again.
				s.Phase = Withdrawing
				add(u, "servers publish it again; withdrawing")
			} else if !o.At.Before(s.Since.Add(m.policy.SettlePeriod)) && g.idle() {
				s.Mode, s.Phase = s.Target, Published
				add(u, "switched to %s mode", s.Mode)
			}
		}
	}

	// 4. Policy: split the idle GPUs.
	m.balance(o.At, uuids, add)
	return ev
}

func (m *Machine) force(u string, s *GPUState, to Mode, why string, add func(string, string, ...any)) {
	if s.Mode == to && s.Phase == Published {
		return
	}
	if s.Phase != Published {
		add(u, "switch to %s aborted: %s", s.Target, why)
	} else {
		add(u, "%s mode: %s", to, why)
	}
	s.Mode, s.Phase, s.Target = to, Published, Unknown
}

// balance starts switches (and makes first assignments) so that the number
// of idle share-mode GPUs meets the policy and the waiting demand.
func (m *Machine) balance(now time.Time, uuids []string, add func(string, string, ...any)) {
	var idleShare, room, flex, fixed int
	var free []int // free shares of the in-use share GPUs, in GPU order
	var wholeCands, shareCands, fresh []string
	for _, u := range uuids {
		g, s := m.obs[u], m.gpus[u]
		if s.Conflict {
			continue
		}
		if s.Mode == Share && s.Phase == Published && g.Healthy && g.ShareUnits > 0 {
			f := ids.SharesPerGPU - g.ShareUnits
			room = max(room, f)
			free = append(free, f)
		}
		if s.Mode == Unknown && s.Phase == Published && (!g.Healthy || !g.Shareable) {
			s.Mode = Whole // published (unhealthy, or never shared) as whole
			add(u, "assigned whole mode")
		}
		if !g.idle() || !g.Healthy {
			continue
		}
		if !g.Shareable {
			fixed++ // an idle whole GPU that never moves
			continue
		}
		flex++
		switch {
		case s.Mode == Unknown && s.Phase == Settling:
			// Never published yet: its target may still change.
			fresh = append(fresh, u)
		case s.Phase != Published:
			if s.Target == Share {
				idleShare++
			}
		case s.Mode == Share:
			idleShare++
			shareCands = append(shareCands, u)
		case s.Mode == Whole:
			wholeCands = append(wholeCands, u)
		case s.Mode == Unknown:
			fresh = append(fresh, u)
		}
	}
	base := m.policy.MinIdleShareGPUs
	if m.policy.ShareHeadroom > 0 && room >= m.policy.ShareHeadroom {
		base = 0
	}
	held := make([]Demand, 0, len(m.held))
	for _, k := range sortedKeys(m.held) {
		held = append(held, m.held[k].d)
	}
	a := shareNeed(m.demand, free, flex, fixed, base)
	b := shareNeed(held, free, flex, fixed, base)
	lo, hi := min(a, b), max(a, b)

	// Fresh GPUs, published nowhere: a placement planned against an earlier
	// publication (before a plugin restart) may still be in flight, so they
	// settle like a switch before their first publication. The landing
	// place comes from the highest-ordered end.
	for i := len(fresh) - 1; i >= 0; i-- {
		u := fresh[i]
		s := m.gpus[u]
		want := lo
		if s.Phase != Published && s.Target == Share {
			want = hi
		}
		target := Whole
		if idleShare < want {
			target = Share
			idleShare++
		}
		if s.Phase == Published {
			s.Phase, s.Since = Settling, now
		} else if s.Target == target {
			continue
		}
		s.Target = target
		add(u, "assigning %s mode after settling", s.Target)
	}
	for i := len(wholeCands) - 1; i >= 0 && idleShare < lo; i-- {
		u := wholeCands[i]
		s := m.gpus[u]
		s.Phase, s.Target = Withdrawing, Share
		idleShare++
		add(u, "switching whole -> share (%d idle share GPUs wanted): withdrawn", lo)
	}
	for i := 0; i < len(shareCands) && idleShare > hi; i++ {
		u := shareCands[i]
		s := m.gpus[u]
		s.Phase, s.Target = Withdrawing, Whole
		idleShare--
		add(u, "switching share -> whole (%d idle share GPUs wanted): withdrawn", hi)
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
		case d.Shares > 0 && d.Shares <= ids.SharesPerGPU:
			if fit(free, d.Shares) || fit(opened, d.Shares) || flex == 0 {
				continue
			}
			flex--
			opened = append(opened, ids.SharesPerGPU-d.Shares)
		}
	}
	n := len(opened)
	if n < base {
		n += min(flex, base-n)
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
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
