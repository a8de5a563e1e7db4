package plan

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// elastic returns the running instances of an elastic group of job on
// node n1, one GPU each from GPU 0, started at 1, 2, ...
func elastic(job, project string, instances, minCount int) []cluster.Allocation {
	var out []cluster.Allocation
	for i := range instances {
		a := running(fmt.Sprintf("%s-%d", job, i), project, 0, int64(i+1), "n1", i)
		a.Job, a.MinCount = job, minCount
		out = append(out, a)
	}
	return out
}

// TestShrinkVictims checks where shrinking stands in the victim order:
// instances above an elastic group's minimum, newest first, before any
// whole job; never below the minimum; and growth only in a plan that
// leaves nothing waiting.
func TestShrinkVictims(t *testing.T) {
	projects := []cluster.Project{{Name: "a", Guaranteed: cluster.GPUs(4)}, {Name: "b"}}
	need := func(n int) cluster.Pending {
		return cluster.Pending{Project: "a", Job: "need", Group: "main", Preemptible: true, Ask: cluster.Ask{WholeGPUs: 1}, Count: n}
	}
	tests := []struct {
		name        string
		allocs      []cluster.Allocation
		pending     []cluster.Pending
		wantShrunk  []string // allocation IDs, in order
		wantSuspend []string
		wantGrow    map[string]int
	}{
		{
			name:       "newest instances above the minimum first",
			allocs:     append(elastic("e", "b", 3, 1), running("w", "b", 0, 10, "n1", 3)),
			pending:    []cluster.Pending{need(2)},
			wantShrunk: []string{"e-2", "e-1"},
		},
		{
			// e-0 was rescheduled (newest) but keeps index 0; Nomad
			// stops the highest indexes when the count falls.
			name: "highest instance index first, as Nomad stops them",
			allocs: func() []cluster.Allocation {
				al := elastic("e", "b", 3, 1)
				for i := range al {
					al[i].Instance = i
				}
				al[0].Start = 99
				return append(al, running("w", "b", 0, 10, "n1", 3))
			}(),
			pending:    []cluster.Pending{need(1)},
			wantShrunk: []string{"e-2"},
		},
		{
			name:        "never below the minimum: then whole jobs",
			allocs:      append(elastic("e", "b", 3, 2), running("w", "b", 0, 10, "n1", 3)),
			pending:     []cluster.Pending{need(2)},
			wantShrunk:  []string{"e-2"},
			wantSuspend: []string{"w"},
		},
		{
			name:   "a shrunk instance grows back when nothing waits",
			allocs: elastic("e", "b", 2, 1),
			pending: []cluster.Pending{{Project: "b", Job: "e", Group: "main", Preemptible: true,
				Ask: cluster.Ask{WholeGPUs: 1}, Count: 3, MinCount: 1, Shrunk: true}},
			wantGrow: map[string]int{"e": 2},
		},
		{
			name:   "no growth while other work waits",
			allocs: append(elastic("e", "b", 2, 1), running("x", "a", 0, 1, "n1", 2)),
			pending: []cluster.Pending{
				{Project: "b", Job: "e", Group: "main", Preemptible: true, Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, MinCount: 1, Shrunk: true},
				{Project: "a", Job: "big", Group: "main", Preemptible: true, Ask: cluster.Ask{WholeGPUs: 4}, Count: 1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := &cluster.Snapshot{Nodes: []cluster.Node{node("n1", 4)}, Projects: projects, Allocations: tt.allocs, Pending: tt.pending}
			res, err := Plan(snap, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var shrunk, suspended []string
			for _, a := range res.Actions {
				switch a.Kind {
				case Shrink:
					shrunk = append(shrunk, a.Allocations...)
				case Suspend:
					suspended = append(suspended, a.Job)
				}
			}
			if !slices.Equal(shrunk, tt.wantShrunk) || !slices.Equal(suspended, tt.wantSuspend) {
				t.Errorf("shrunk %v suspended %v, want %v and %v\n%v", shrunk, suspended, tt.wantShrunk, tt.wantSuspend, res.Actions)
			}
			grown := map[string]int{}
			for _, g := range res.Grow {
				grown[g.Job] += g.Count
				if len(g.Places) != g.Count {
					t.Errorf("growth of %s: %d places for %d instances", g.Job, len(g.Places), g.Count)
				}
			}
			if fmt.Sprint(grown) != fmt.Sprint(tt.wantGrow) && !(len(grown) == 0 && len(tt.wantGrow) == 0) {
				t.Errorf("grown %v, want %v", grown, tt.wantGrow)
			}
		})
	}
}

// TestShrinkFollowsNomadsStopOrder: a shrink stops the group's
// highest-numbered instance, so an instance lower in that order is no
// victim while the ones above it run, even on the node the workload
// needs. Here the workload fits only on n2, where instance 1 runs, while
// instance 2 runs on n1: the plan suspends the whole job on n2 rather
// than name an instance a scale would not stop (the service would hold
// that shrink back every cycle).
func TestShrinkFollowsNomadsStopOrder(t *testing.T) {
	n1, n2 := node("n1", 2), node("n2", 2)
	for i := range n2.GPUs {
		n2.GPUs[i].Model = "H100"
	}
	allocs := elastic("e", "b", 3, 1)
	for i := range allocs {
		allocs[i].Instance = i
	}
	allocs[1].Node, allocs[1].GPUs = "n2", []int{0}
	allocs[2].GPUs = []int{1}
	allocs = append(allocs, running("w", "b", 0, 10, "n2", 1))
	projects := []cluster.Project{{Name: "a", Guaranteed: cluster.GPUs(4)}, {Name: "b"}}
	pending := []cluster.Pending{{Project: "a", Job: "need", Group: "main", Preemptible: true,
		Ask: cluster.Ask{WholeGPUs: 1, Models: []string{"H100"}}, Count: 1}}
	snap := &cluster.Snapshot{Nodes: []cluster.Node{n1, n2}, Projects: projects, Allocations: allocs, Pending: pending}
	res, err := Plan(snap, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var stopped []string
	for _, a := range res.Actions {
		switch a.Kind {
		case Shrink:
			stopped = append(stopped, "shrink "+a.Allocations[0])
		case Suspend:
			stopped = append(stopped, "suspend "+a.Job)
		}
	}
	if want := []string{"suspend w"}; !slices.Equal(stopped, want) {
		t.Errorf("stopped %v, want %v\n%v", stopped, want, res.Actions)
	}
}

// TestApplyShrinkAndGrow checks the snapshot after a plan: a shrunk
// instance comes back as Shrunk pending work of its group (also when its
// job is then suspended whole), and growth turns Shrunk pending work into
// allocations.
func TestApplyShrinkAndGrow(t *testing.T) {
	snap := &cluster.Snapshot{Nodes: []cluster.Node{node("n1", 4)}, Projects: []cluster.Project{{Name: "b"}},
		Allocations: elastic("e", "b", 3, 1)}
	shrink := func(id string) Action {
		return Action{Kind: Shrink, Project: "b", Job: "e", Group: "main", Allocations: []string{id}, Workload: -1}
	}
	tests := []struct {
		name          string
		res           Result
		wantRunning   int
		wantShrunk    int
		wantSuspended int
	}{
		{"shrink one", Result{Actions: []Action{shrink("e-2")}}, 2, 1, 0},
		{"shrink, then suspend the job whole", Result{Actions: []Action{shrink("e-2"),
			{Kind: Suspend, Project: "b", Job: "e", Allocations: []string{"e-0", "e-1"}, Workload: -1}}}, 0, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := Apply(snap, tt.res, 100)
			shrunk, suspended := 0, 0
			for _, w := range next.Pending {
				switch {
				case w.Shrunk && w.MinCount == 1:
					shrunk += w.Count
				case w.Suspended:
					suspended += w.Count
				}
			}
			if len(next.Allocations) != tt.wantRunning || shrunk != tt.wantShrunk || suspended != tt.wantSuspended {
				t.Errorf("running %d, shrunk %d, suspended %d; want %d, %d, %d",
					len(next.Allocations), shrunk, suspended, tt.wantRunning, tt.wantShrunk, tt.wantSuspended)
			}
		})
	}
	next := Apply(snap, Result{Actions: []Action{shrink("e-2"), shrink("e-1")}}, 100)
	grown := Apply(next, Result{Grow: []Growth{{Workload: 0, Project: "b", Job: "e", Group: "main", Count: 1,
		Places: []Placement{{Node: "n1", GPUs: []int{1}}}}}}, 200)
	if len(grown.Allocations) != 2 || len(grown.Pending) != 1 || grown.Pending[0].Count != 1 || grown.Allocations[1].MinCount != 1 {
		t.Errorf("after growth by 1 of 2: allocations %+v, pending %+v", grown.Allocations, grown.Pending)
	}
}
