package service

import (
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// lastPlan is the last plan made and what it was made from. plan.Plan is
// deterministic for its snapshot and policy, so a cycle whose snapshot
// equals the last one (cluster.Snapshot.Equal: under 10 ms at 5,000
// nodes, against about 120 ms to plan) with the same task mix takes that
// plan again instead of planning: most of Nomad's events (a task's
// state, an allocation's health, a job registered again unchanged)
// change nothing the plan reads. Only the cycle (under cycleMu) uses it.
type lastPlan struct {
	snap *cluster.Snapshot
	mix  *placement.Workload
	res  plan.Result
	// gen counts the plans made: cycles that took the same plan (and
	// so planned equal snapshots) see the same gen.
	gen uint64
	// planner makes the plans, reusing what the last one derived from
	// an unchanged running cluster (plan.Planner).
	planner plan.Planner
}

// of returns the plan of snap with task mix mix and options opts: the
// last one when it was made from an equal snapshot and the same mix
// (reused), else a new one. The caller may change the result it gets.
func (l *lastPlan) of(snap *cluster.Snapshot, mix *placement.Workload, opts plan.Options) (res plan.Result, reused bool, err error) {
	if l.snap != nil && l.mix == mix && l.snap.Equal(snap) {
		l.snap = snap // the newer of two equal snapshots; the older may go
		return copyResult(l.res), true, nil
	}
	l.snap = nil
	l.gen++
	if res, err = l.planner.Plan(snap, opts); err != nil {
		return res, false, err
	}
	l.snap, l.mix, l.res = snap, mix, res
	return copyResult(res), false, nil
}

// copyResult copies the lists of res that a cycle changes or appends to
// (boundPartialGangs), so that the kept plan stays as it was made.
func copyResult(res plan.Result) plan.Result {
	res.Actions = slices.Clone(res.Actions)
	res.GangsWaiting = slices.Clone(res.GangsWaiting)
	res.Unplaced = slices.Clone(res.Unplaced)
	res.Grow = slices.Clone(res.Grow)
	return res
}
