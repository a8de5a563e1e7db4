package plan

import (
	"fmt"

	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// Consolidation (docs/design.md, Consolidation): a workload that may run
// on idle capacity but finds none that fits is placed by moving running
// work that opted in (cluster.Allocation.Movable) to another node: the
// moved job is suspended with a reason that says so, and its room on the
// other node is held for it, as a reservation's is, so that it comes back
// there in the next cycle. The plan moves only when it places both the
// moved work and the workload, at most placement.DefaultConsolidationLimits
// .MaxMoves jobs for one instance and Options.MaxMoves in a cycle; before
// reclaim and preemption, which stop work until there is room again.

// MoveReason starts the reason of every suspension that moves a movable
// job.
const MoveReason = "moved to make room for"

// DefaultMaxMoves is the most movable jobs a plan moves when
// Options.MaxMoves is 0.
const DefaultMaxMoves = 4

// moveBudget is how many more jobs this plan may move.
func (s *state) moveBudget() int {
	limit := s.maxMoves
	if limit == 0 {
		limit = DefaultMaxMoves
	}
	return limit - s.plan.moves
}

// consolidate places the attempt's instance by moving movable jobs, if
// that works within the budget, and reports whether it did.
func (s *state) consolidate(a *attempt) (bool, error) {
	budget := s.moveBudget()
	if budget <= 0 || a.reserve || a.task.GPUCount == 0 || len(s.movable) == 0 {
		return false, nil
	}
	key := shapeOf(a.task, a.nodes)
	if at, ok := s.plan.consolidateFailed[key]; ok && at == s.plan.changes {
		return false, nil
	}
	pieces, jobs := s.movablePieces(a)
	lim := placement.DefaultConsolidationLimits
	lim.MaxMoves = min(lim.MaxMoves, budget)
	lim.Allowed = a.nodes.has
	moves, ch, ok := placement.Consolidate(&s.cluster.Cluster, a.task, pieces, s.movePolicy(), lim)
	if !ok {
		s.plan.consolidateFailed[key] = s.plan.changes
		return false, nil
	}
	// Every moved job leaves before any comes back: one may land where
	// another was.
	for _, m := range moves {
		j := jobs[m.Piece]
		s.suspend(a, j, CauseMove, fmt.Sprintf("%s %s on %s (gpushare.movable): it comes back on %s",
			MoveReason, a.wl.Job, s.cluster.Nodes[ch.Node].Name, s.cluster.Nodes[m.To.Node].Name))
	}
	for _, m := range moves {
		s.holdMoved(a, jobs[m.Piece], pieces[m.Piece].Task, m.To)
	}
	s.plan.moves += len(moves)
	a.undo = append(a.undo, func() { s.plan.moves -= len(moves) })
	reason := fmt.Sprintf("%splaced by moving %d movable job(s) to other nodes; %s", a.resume, len(moves), s.idleReason(a.p, a.inst))
	return true, s.place(a, ch, reason)
}

// movablePieces lists the jobs that may move now (see movableNow), each
// as the placement it holds.
func (s *state) movablePieces(a *attempt) ([]placement.Placed, []int32) {
	var pieces []placement.Placed
	var jobs []int32
	for _, j := range s.movable {
		if !s.movableNow(a, j) {
			continue
		}
		al := s.jobs[j].allocs[0]
		info := s.allocs.get(al)
		var gpus []int
		for _, g := range s.allocs.gpusOf(info) {
			gpus = append(gpus, int(g))
		}
		pieces = append(pieces, placement.Placed{
			Task:   s.cluster.task(s.snap.Allocations[al].Ask),
			Choice: placement.Choice{Node: int(info.node), GPUs: gpus},
		})
		jobs = append(jobs, j)
	}
	return pieces, jobs
}

// movableNow reports whether movable job j may move for attempt a: it
// runs, is not the attempt's own job, is past its minimum runtime, and no
// reservation counts on it.
func (s *state) movableNow(a *attempt, j int32) bool {
	job := &s.jobs[j]
	return !job.suspended && !job.planned && !job.fenced && !job.young && j != a.exclude &&
		!s.allocs.get(job.allocs[0]).gone
}

// holdMoved holds, for moved job j running task t, its room at to, as
// a reservation does: no reservation is queued for it.
func (s *state) holdMoved(a *attempt, j int32, t placement.Task, to placement.Choice) {
	job := &s.jobs[j]
	if err := s.cluster.Assign(to, t); err != nil && s.broken == nil {
		s.broken = fmt.Errorf("%w: moving %s: %w", ErrPlacement, job.name, err)
	}
	s.cluster.summarize(to.Node)
	ps := &s.projects[job.project]
	held := job.held
	ps.addHeld(held)
	ps.reserved += held
	at, had := s.plan.reservations[j]
	s.plan.reservations[j] = -1
	a.undo = append(a.undo, func() {
		s.cluster.Release(to, t)
		s.cluster.summarize(to.Node)
		s.cluster.releases++
		ps.addHeld(-held)
		ps.reserved -= held
		if had {
			s.plan.reservations[j] = at
		} else {
			delete(s.plan.reservations, j)
		}
	})
}

// movePolicy places moved work: the plan's policy, or first fit.
func (s *state) movePolicy() placement.Policy {
	if s.cluster.policy != nil {
		return s.cluster.policy
	}
	return placement.FirstFit{}
}

// listMovable lists the running jobs that may be moved: one allocation (in
// one shape) that opted in, not a system job, a shrink unit or one the
// plan may never stop.
func (s *state) listMovable() {
	for j := range s.jobs {
		job := &s.jobs[j]
		if len(job.allocs) == 1 && s.snap.Allocations[job.allocs[0]].Movable &&
			!job.system && !job.shrink && job.neverVictim == "" {
			s.movable = append(s.movable, int32(j))
		}
	}
}
