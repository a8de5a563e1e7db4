// Package plan decides, for one scheduling cycle, which pending workloads to
// place where and which running jobs to suspend to make room for them.
//
// Plan reads a cluster.Snapshot, computes every project's deserved share
// (package fairshare) over the capacity that can be given (available GPUs of
// available nodes, plus what runs where nothing else can go), and first
// holds every project to its hard limit: Nomad places queued work on idle
// GPUs by itself, so work beyond a limit is suspended, lowest job priority
// and newest first (holdToLimits). It then walks the pending workloads in
// fairness order (projects most below their guarantee, then most below their
// deserved share, first; then project priority, workload priority and submit
// time). For each workload it tries, in this order (docs/design.md, Reclaim
// and preempt):
//
//  1. idle capacity: as long as jobs wait no GPU stays idle, so a workload
//     that fits on free GPUs is placed even above its project's guarantee (up
//     to its limit), as over-quota, preemptible work; the placement policy
//     chooses among a bounded number of the nodes with room, as Nomad
//     scores a bounded number of feasible nodes (Options.PlacementCandidates,
//     placeCandidates);
//  2. reclaim: when the project stays within its guarantee after placement,
//     running jobs of projects above their guarantee are suspended, never
//     pushing such a project below its guarantee; when the project is above
//     its guarantee but stays within its deserved share, only projects above
//     their deserved share give, never below it;
//  3. preempt: lower-priority jobs of the workload's own project make way.
//
// A workload runs only on the available nodes its constraints admit
// (Pending.Nodes); one that fits on none of them even idle is unplaceable:
// no demand, not walked (findUnplaceable). The task groups of a suspended job
// are placed together or not at all, because a job is resumed as a whole
// (units).
//
// Victims are whole jobs (the quota service suspends jobs) and, before any
// of them, the instances of elastic groups above their minimum (shrink
// units, see listShrinks), taken in the order of compareVictims
// (docs/design.md, Victim order) until the workload fits on one node (for a
// share, on one GPU); then every victim not needed is put back
// (findVictims). System jobs are never victims. Non-preemptible work
// is protected only within its project's guarantee: it is admitted only
// there, and what Nomad placed above it is a victim like preemptible work
// (listVictims). Suspended jobs come back as pending workloads and are
// resumed by the same walk when they fit.
//
// The pending groups of a gang (cluster.Pending.Gang) are one unit too, placed
// all together with the victims that make room for all of them, or not at
// all. A gang that runs in part is completed in its turn or waits whole:
// its running part is suspended (Result.GangsWaiting); the partial gangs
// later in fairness order give way to an earlier one that does not fit
// otherwise, so two partial gangs never deadlock (completeGang).
//
// Shrunk instances grow back as the plan's lowest priority: only in a plan
// that leaves nothing waiting and stops nothing, on idle capacity, in
// fairness order (grow, Result.Grow).
//
// Work placed earlier in the cycle is a victim like running work, ordered as
// the next cycle will see it (newer than any running job): taking it back
// removes its placements from the plan instead of suspending it, and the
// workload waits again. After the walk, the workloads left waiting (and
// those taken back) are walked again while that places anything, so that a
// workload that failed before later work was placed or capacity was
// released gets its chance in this cycle rather than reclaiming a fresh
// start in the next one; with them, every job suspended so far reserves the
// room it would come back to in the next cycle (reserveFor), so that
// nothing this plan starts is displaced by it there.
//
// Plan does no I/O and is deterministic for a given snapshot and policy.
package plan

import (
	"errors"
	"fmt"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// Options tune one planning cycle.
type Options struct {
	// Policy chooses nodes and GPUs on idle capacity. Nil means first fit:
	// the lowest-numbered node that fits, and on it the lowest-numbered
	// GPUs (placement.Cluster.Fits).
	Policy placement.Policy
	// PlacementCandidates bounds the nodes the policy scores for one
	// placement on idle capacity, as Nomad scores only a limited number of
	// feasible nodes: the first PlacementCandidates nodes, in cluster
	// order, that the workload may use and fits on. 0 means
	// DefaultPlacementCandidates; a negative value scores every node.
	// When no more nodes than the bound admit the workload, the policy
	// scores them all, as without a bound. Policies that sample nodes
	// themselves ("random" and the "deployed" models) are not bounded.
	PlacementCandidates int
	// MaxMoves bounds the movable jobs one plan moves to make room
	// (docs/design.md, Consolidation): 0 means DefaultMaxMoves, a
	// negative value moves none.
	MaxMoves int
}

// Kind is what an action does.
type Kind uint8

const (
	// Suspend stops a whole running job; it comes back as pending work.
	Suspend Kind = iota + 1
	// Place starts one instance of a pending workload on a node and GPUs.
	Place
	// Shrink stops one instance of an elastic group above its minimum
	// (cluster.Allocation.MinCount): its job keeps running with the rest,
	// and the instance comes back as Shrunk pending work that may grow
	// back later (Result.Grow).
	Shrink
)

// String returns "suspend", "place" or "shrink".
func (k Kind) String() string {
	switch k {
	case Suspend:
		return "suspend"
	case Place:
		return "place"
	case Shrink:
		return "shrink"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Cause says why an action stops work.
type Cause uint8

const (
	// CauseReclaim makes room for a pending workload (Action.Workload):
	// reclaimed from another project or preempted inside its own, or a
	// placement of this plan taken back.
	CauseReclaim Cause = iota
	// CauseLimit holds a project or department to its hard limit.
	CauseLimit
	// CauseGang makes a gang that ran in part wait whole (GangReason).
	CauseGang
	// CauseMove moves a movable job to make room (MoveReason).
	CauseMove
	// CauseHold holds queued work from a room the plan makes
	// (HoldReason).
	CauseHold
)

var causeNames = [...]string{CauseReclaim: "reclaim", CauseLimit: "limit", CauseGang: "gang", CauseMove: "move", CauseHold: "hold"}

// String returns the cause's name, as suspension records keep it.
func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return fmt.Sprintf("Cause(%d)", uint8(c))
}

// ParseCause reads a name String returned.
func ParseCause(name string) (Cause, bool) {
	for c, n := range causeNames {
		if n == name {
			return Cause(c), true
		}
	}
	return 0, false
}

// Action is one step of the plan. Actions are ordered: the suspensions that
// make room for a placement come right before it.
type Action struct {
	Kind    Kind
	Project string
	Job     string
	// Allocations, for Suspend, are the IDs of the job's running
	// allocations, all of which stop; for Shrink, the ID of the one
	// instance that stops.
	Allocations []string
	// Workload is the position in Snapshot.Pending of the workload placed
	// (Place) or made room for (Suspend); it is -1 for a suspension that
	// holds a project to its limit (see holdToLimits) or holds queued
	// work from a room the plan makes (HoldReason).
	Workload int
	// Group, Node and GPUs, for Place, say which task group goes where
	// (GPU indexes on the node; none for CPU-only work). Group, for
	// Shrink, is the elastic group that shrinks.
	Group string
	Node  string
	GPUs  []int
	// Reason explains the step to a person.
	Reason string
	// Cause says why a Suspend or Shrink stops work.
	Cause Cause
	// ForGuarantee, for Suspend, says that the workload it makes room
	// for keeps its project within its guarantee: restoring a guarantee
	// waits for no hold (package actuator).
	ForGuarantee bool
}

// String is a one-line rendering of the action.
func (a Action) String() string {
	switch a.Kind {
	case Suspend:
		return fmt.Sprintf("suspend %s (project %s): %s", a.Job, a.Project, a.Reason)
	case Shrink:
		return fmt.Sprintf("shrink %s/%s by %v (project %s): %s", a.Job, a.Group, a.Allocations, a.Project, a.Reason)
	}
	return fmt.Sprintf("place %s/%s on %s GPUs %v (project %s): %s", a.Job, a.Group, a.Node, a.GPUs, a.Project, a.Reason)
}

// ProjectShare is one project's quota picture for the cycle.
type ProjectShare struct {
	Name       string
	Guaranteed cluster.Shares
	// Demand is what the project runs plus what it has pending (not
	// counting shrunk instances of elastic groups).
	Demand cluster.Shares
	// Deserved is its fair share this cycle (see package fairshare).
	Deserved cluster.Shares
	// Usage is what it held before the plan, Planned what it holds after.
	Usage   cluster.Shares
	Planned cluster.Shares
	// Exposed names its non-preemptible jobs that run above its guarantee
	// (Nomad placed them by itself): they count as preemptible.
	Exposed []string
	// NeverVictims are "job: reason" for its jobs that are never victims
	// (cluster.Allocation.NeverVictim), in the order of their first
	// allocation in the snapshot.
	NeverVictims []string
}

// Unplaced is a pending workload the plan leaves waiting, and why.
type Unplaced struct {
	Workload int
	Reason   string
}

// Result is the outcome of one planning cycle.
type Result struct {
	// Shares has one entry per project, in Snapshot.Projects order.
	Shares []ProjectShare
	// Departments has one entry per department, in
	// Snapshot.Departments order: what its projects demand, deserve,
	// held and hold after the plan, together (Exposed and NeverVictims
	// are empty).
	Departments []ProjectShare
	Actions     []Action
	Unplaced    []Unplaced
	// Unplaceable are the pending workloads no plan could place (they fit
	// on no node that admits them, even idle); they are not part of their
	// projects' demand.
	Unplaceable []Unplaced
	// GangsWaiting are the gangs that ran in part and wait whole: the
	// plan suspends their running part (see GangWait), in the order of
	// their waiting workloads in Snapshot.Pending.
	GangsWaiting []GangWait
	// Grow are the elastic groups that may grow back toward their count
	// now, in fairness order: the plan's lowest priority, only in a plan
	// that leaves nothing waiting and stops nothing (see Growth).
	Grow []Growth
}

// ErrPlacement is wrapped when the policy returns a choice that does not
// fit; it is a bug in the policy.
var ErrPlacement = errors.New("placement policy returned a choice that does not fit")

// Plan computes deserved shares and the ordered actions for one cycle. It
// returns an error, wrapping cluster.ErrInvalid, when the snapshot contradicts
// itself. A Planner plans a run of snapshots faster.
func Plan(snap *cluster.Snapshot, opts Options) (Result, error) {
	s, err := newState(snap, opts)
	if err != nil {
		return Result{}, err
	}
	if err := s.run(); err != nil {
		return Result{}, err
	}
	return s.result(), nil
}

// result is the outcome of the cycle once the walk is done.
func (s *state) result() Result {
	res := Result{Actions: s.plan.actions, Unplaced: s.plan.unplaced, Unplaceable: s.plan.unplaceable,
		Shares: make([]ProjectShare, len(s.snap.Projects)), GangsWaiting: s.gangsWaiting(), Grow: s.plan.grow}
	if len(s.plan.cancelled) > 0 || len(s.plan.guards) > 0 {
		res.Actions = make([]Action, 0, len(s.plan.guards)+len(s.plan.actions)-len(s.plan.cancelled))
		res.Actions = append(res.Actions, s.plan.guards...)
		for i, a := range s.plan.actions {
			if !s.plan.cancelled[int32(i)] {
				res.Actions = append(res.Actions, a)
			}
		}
	}
	for i := range s.snap.Projects {
		p := &s.projects[i]
		res.Shares[i] = ProjectShare{
			Name:         s.snap.Projects[i].Name,
			Guaranteed:   p.guaranteed,
			Demand:       p.demand,
			Deserved:     p.deserved,
			Usage:        s.index.Held[i],
			Planned:      p.held - p.reserved,
			Exposed:      p.exposed,
			NeverVictims: p.neverVictims,
		}
	}
	res.Departments = s.departmentShares(res.Shares)
	return res
}

// departmentShares sums the projects' shares per department.
func (s *state) departmentShares(shares []ProjectShare) []ProjectShare {
	out := make([]ProjectShare, len(s.snap.Departments))
	for i, d := range s.snap.Departments {
		out[i] = ProjectShare{Name: d.Name, Guaranteed: d.Guaranteed}
	}
	for i, d := range s.index.ProjectDepartment {
		if d < 0 {
			continue
		}
		o, p := &out[d], &shares[i]
		o.Demand += p.Demand
		o.Deserved += p.Deserved
		o.Usage += p.Usage
		o.Planned += p.Planned
	}
	return out
}

// demand is, per project, what it runs plus what it has pending, less the
// workloads never marks (they fit nowhere) and the shrunk instances of
// elastic groups (they grow back only on capacity nobody else wants).
func demand(snap *cluster.Snapshot, x *cluster.Index, never []bool) []cluster.Shares {
	d := make([]cluster.Shares, len(snap.Projects))
	copy(d, x.Held)
	for i := range snap.Pending {
		if !never[i] && !snap.Pending[i].Shrunk {
			d[x.PendingProject[i]] += snap.Pending[i].GPUShares()
		}
	}
	return d
}
