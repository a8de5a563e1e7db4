package service

import (
	"errors"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// TestLastPlanIsTakenOnlyForTheSameInput: a cycle takes the last plan
// again when its snapshot equals the last one and the task mix is the
// same, and plans otherwise; what a cycle changes in the plan it gets
// does not reach the next cycle's.
func TestLastPlanIsTakenOnlyForTheSameInput(t *testing.T) {
	snapshot := func(submit int64) *cluster.Snapshot {
		return &cluster.Snapshot{Nodes: []cluster.Node{{Name: "n", GPUs: []cluster.GPU{{Model: "H100"}}}},
			Projects: []cluster.Project{{Name: "p", Guaranteed: 100}},
			Pending:  []cluster.Pending{{Project: "p", Job: "j", Group: "g", Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, Submit: submit}}}
	}
	mixA, mixB := &placement.Workload{}, &placement.Workload{}
	var l lastPlan
	of := func(snap *cluster.Snapshot, mix *placement.Workload) (plan.Result, bool) {
		res, reused, err := l.of(snap, mix, plan.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return res, reused
	}
	first, reused := of(snapshot(1), mixA)
	if reused || l.gen != 1 {
		t.Fatalf("first cycle: reused %v, plans made %d; want a plan made", reused, l.gen)
	}
	first.Actions[0].Job = "changed by the cycle"
	first.Actions = append(first.Actions, plan.Action{Kind: plan.Suspend})
	for _, tc := range []struct {
		name   string
		snap   *cluster.Snapshot
		mix    *placement.Workload
		reused bool
	}{
		{"an equal snapshot, the same mix", snapshot(1), mixA, true},
		{"another snapshot", snapshot(2), mixA, false},
		{"the same snapshot as the last, another mix", snapshot(2), mixB, false},
		{"again the same", snapshot(2), mixB, true},
	} {
		before := l.gen
		res, reused := of(tc.snap, tc.mix)
		if reused != tc.reused || (l.gen > before) == tc.reused {
			t.Errorf("%s: reused %v with %d plans made, want reused %v", tc.name, reused, l.gen-before, tc.reused)
		}
		if len(res.Actions) != 1 || res.Actions[0].Job != "j" {
			t.Errorf("%s: actions %+v, want the plan as made", tc.name, res.Actions)
		}
	}
	invalid := snapshot(3)
	invalid.Pending[0].Project = "no such project"
	_, _, err := l.of(invalid, mixB, plan.Options{})
	if !errors.Is(err, cluster.ErrInvalid) {
		t.Fatalf("a failed plan: error %v, want cluster.ErrInvalid", err)
	}
	if _, reused := of(snapshot(3), mixB); reused {
		t.Error("the cycle after a failed plan took a plan again")
	}
}
