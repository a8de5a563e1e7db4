package plan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// TestQueuedWorkIsHeldFromARoom: a reclaims one of b's four whole GPUs
// (the newest job, on n2). Of b's queued jobs left waiting, only those
// Nomad could place in the room on n2 are held, by suspensions before
// every other action: not one that may run on n1 only, nor one too big
// for the room, nor a job the service suspended, nor the pending group of
// a job that runs (holding it would stop what runs).
func TestQueuedWorkIsHeldFromARoom(t *testing.T) {
	queued := func(job, group string, whole int) cluster.Pending {
		return cluster.Pending{Project: "b", Job: job, Group: group, Ask: cluster.Ask{WholeGPUs: whole}, Count: 1, Preemptible: true, Submit: 10}
	}
	pinned := queued("b-pinned", "main", 1)
	pinned.Nodes = []string{"n1"}
	suspended := queued("b-suspended", "main", 1)
	suspended.Suspended = true
	snap := cluster.Snapshot{
		Nodes:    []cluster.Node{node("n1", 2), node("n2", 2)},
		Projects: []cluster.Project{{Name: "a", Guaranteed: 200}, {Name: "b"}},
		Allocations: []cluster.Allocation{running("b-run1", "b", 0, 1, "n1", 0), running("b-run2", "b", 0, 2, "n1", 1),
			running("b-run3", "b", 0, 3, "n2", 0), running("b-run4", "b", 0, 4, "n2", 1)},
		Pending: []cluster.Pending{
			{Project: "a", Job: "a1", Group: "main", Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, Preemptible: true, Submit: 5},
			queued("b-queued", "main", 1), pinned, queued("b-big", "main", 2), suspended, queued("b-run1", "extra", 1),
		},
	}
	res, err := Plan(&snap, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var held, suspendedJobs []string
	for i, a := range res.Actions {
		if a.Kind != Suspend {
			continue
		}
		if !strings.HasPrefix(a.Reason, HoldReason) {
			if a.Cause != CauseReclaim {
				t.Errorf("reclaim of %s has cause %s", a.Job, a.Cause)
			}
			suspendedJobs = append(suspendedJobs, a.Job)
			continue
		}
		held = append(held, a.Job)
		if i >= len(held) {
			t.Errorf("hold of %s is action %d, after other actions: %v", a.Job, i, res.Actions)
		}
		if a.Workload != -1 || a.Cause != CauseHold || len(a.Allocations) != 0 || a.Project != "b" || !strings.Contains(a.Reason, "on n2") || !strings.Contains(a.Reason, "for a1/main") {
			t.Errorf("hold %+v: want workload -1, cause hold, no allocations, project b, and a reason naming n2 and a1/main", a)
		}
	}
	if strings.Join(suspendedJobs, " ") != "b-run4" {
		t.Fatalf("suspended %v for a1, want b-run4; plan %v", suspendedJobs, res.Actions)
	}
	if strings.Join(held, " ") != "b-queued" {
		t.Errorf("held %v, want b-queued only; plan %v", held, res.Actions)
	}

	// The next cycle: the held job is suspended work like any, and
	// nothing is held again while the room waits for a1.
	next := Apply(&snap, res, 20)
	res2, err := Plan(next, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range res2.Actions {
		if a.Kind == Suspend {
			t.Errorf("next cycle suspends %s: %s", a.Job, a.Reason)
		}
	}
}

// TestNoHoldWithoutARoom: a plan that stops nothing holds nothing, even
// with queued work left waiting.
func TestNoHoldWithoutARoom(t *testing.T) {
	snap := cluster.Snapshot{
		Nodes:       []cluster.Node{node("n1", 1)},
		Projects:    []cluster.Project{{Name: "a"}, {Name: "b"}},
		Allocations: []cluster.Allocation{running("a-run", "a", 0, 1, "n1", 0)},
		Pending:     []cluster.Pending{{Project: "b", Job: "b1", Group: "main", Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, Preemptible: true}},
	}
	res, err := Plan(&snap, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Actions) != 0 {
		t.Errorf("actions %v, want none", res.Actions)
	}
}

// TestHoldsAreBounded: of more queued jobs than MaxHolds that could take
// the room, those Nomad would place first are held (higher priority, then
// older), MaxHolds of them.
func TestHoldsAreBounded(t *testing.T) {
	snap := cluster.Snapshot{
		Nodes:       []cluster.Node{node("n1", 1)},
		Projects:    []cluster.Project{{Name: "a", Guaranteed: 100}, {Name: "b"}},
		Allocations: []cluster.Allocation{running("b-run", "b", 0, 1, "n1", 0)},
		Pending:     []cluster.Pending{{Project: "a", Job: "a1", Group: "main", Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, Preemptible: true, Submit: 1}},
	}
	extra := 6
	for i := range MaxHolds + extra {
		snap.Pending = append(snap.Pending, cluster.Pending{Project: "b", Job: fmt.Sprintf("q%03d", i), Group: "main",
			Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, Preemptible: true, Submit: int64(100 + i), Priority: i % 2})
	}
	res, err := Plan(&snap, Options{})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	for _, a := range res.Actions {
		if a.Cause == CauseHold {
			held[a.Job] = true
		}
	}
	if len(held) != MaxHolds {
		t.Fatalf("%d holds, want %d", len(held), MaxHolds)
	}
	// Left out: the newest priority-0 jobs (even indexes), the last
	// extra of them.
	for i := range MaxHolds + extra {
		name := fmt.Sprintf("q%03d", i)
		wantHeld := i%2 == 1 || i < MaxHolds+extra-2*extra
		if held[name] != wantHeld {
			t.Errorf("%s (priority %d) held %v, want %v", name, i%2, held[name], wantHeld)
		}
	}
}
