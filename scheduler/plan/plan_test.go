package plan

import (
	"errors"
	"slices"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// builder helpers keep the table rows short.
func node(name string, gpus int) cluster.Node {
	n := cluster.Node{Name: name, CPUMilli: 64000, MemoryMiB: 1 << 20, GPUs: make([]cluster.GPU, gpus)}
	for i := range n.GPUs {
		n.GPUs[i] = cluster.GPU{Model: "A100"}
	}
	return n
}

func running(id, project string, prio int, start int64, nodeName string, gpu int) cluster.Allocation {
	return cluster.Allocation{ID: id, Project: project, Job: id, Group: "main", Priority: prio, Preemptible: true,
		Ask: cluster.Ask{WholeGPUs: 1}, Node: nodeName, GPUs: []int{gpu}, Start: start}
}

func neverVictim(a cluster.Allocation, why string) cluster.Allocation {
	a.NeverVictim = why
	return a
}

func TestPlanVictims(t *testing.T) {
	tests := []struct {
		name        string
		nodes       []cluster.Node // n1 with two GPUs when empty
		projects    []cluster.Project
		allocs      []cluster.Allocation
		incoming    cluster.Pending
		wantVictims []string
		wantPlaced  bool
	}{
		{
			name:     "newest job of the over-quota project",
			projects: []cluster.Project{{Name: "a"}, {Name: "b", Guaranteed: 100}},
			allocs: []cluster.Allocation{
				running("a1", "a", 0, 1, "n1", 0), running("a2", "a", 0, 2, "n1", 1),
			},
			incoming:    cluster.Pending{Project: "b", Job: "b1", Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, Preemptible: true},
			wantVictims: []string{"a2"},
			wantPlaced:  true,
		},
		{
			name:     "no victim below the guarantee",
			projects: []cluster.Project{{Name: "a", Guaranteed: 200}, {Name: "b", Guaranteed: 100}},
			allocs: []cluster.Allocation{
				running("a1", "a", 0, 1, "n1", 0), running("a2", "a", 0, 2, "n1", 1),
			},
			incoming: cluster.Pending{Project: "b", Job: "b1", Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, Preemptible: true},
		},
		{
			name:     "lower-priority project first",
			projects: []cluster.Project{{Name: "a", Priority: 5}, {Name: "c", Priority: 1}, {Name: "b", Guaranteed: 100}},
			allocs: []cluster.Allocation{
				running("a1", "a", 0, 9, "n1", 0), running("c1", "c", 9, 1, "n1", 1),
			},
			incoming:    cluster.Pending{Project: "b", Job: "b1", Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, Preemptible: true},
			wantVictims: []string{"c1"},
			wantPlaced:  true,
		},
		{
			name:     "a job marked never a victim is passed over",
			projects: []cluster.Project{{Name: "a"}, {Name: "b", Guaranteed: 100}},
			allocs: []cluster.Allocation{
				running("a1", "a", 0, 1, "n1", 0), neverVictim(running("a2", "a", 0, 2, "n1", 1), "cannot come back"),
			},
			incoming:    cluster.Pending{Project: "b", Job: "b1", Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, Preemptible: true},
			wantVictims: []string{"a1"},
			wantPlaced:  true,
		},
		{
			name:     "nothing to reclaim when every job above the guarantee is never a victim",
			projects: []cluster.Project{{Name: "a"}, {Name: "b", Guaranteed: 100}},
			allocs: []cluster.Allocation{
				neverVictim(running("a1", "a", 0, 1, "n1", 0), "x"), neverVictim(running("a2", "a", 0, 2, "n1", 1), "y"),
			},
			incoming: cluster.Pending{Project: "b", Job: "b1", Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, Preemptible: true},
		},
		{
			name:     "two GPUs on one node, unneeded victim put back",
			nodes:    []cluster.Node{node("n1", 2), node("n2", 1)},
			projects: []cluster.Project{{Name: "a"}, {Name: "b", Guaranteed: 200}},
			allocs: []cluster.Allocation{
				running("a1", "a", 0, 4, "n1", 0), running("a2", "a", 0, 3, "n2", 0), running("a3", "a", 0, 2, "n1", 1),
			},
			incoming:    cluster.Pending{Project: "b", Job: "b1", Ask: cluster.Ask{WholeGPUs: 2}, Count: 1, Preemptible: true},
			wantVictims: []string{"a1", "a3"},
			wantPlaced:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodes := tt.nodes
			if nodes == nil {
				nodes = []cluster.Node{node("n1", 2)}
			}
			snap := &cluster.Snapshot{
				Nodes:       nodes,
				Projects:    tt.projects,
				Allocations: tt.allocs,
				Pending:     []cluster.Pending{tt.incoming},
			}
			res, err := Plan(snap, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var victims []string
			placed := false
			for _, a := range res.Actions {
				if a.Kind == Suspend {
					victims = append(victims, a.Job)
				} else {
					placed = true
				}
				if a.Reason == "" {
					t.Errorf("action %v has no reason", a)
				}
			}
			slices.Sort(victims)
			if !slices.Equal(victims, tt.wantVictims) || placed != tt.wantPlaced {
				t.Errorf("victims %v placed %v, want %v placed %v; actions %v", victims, placed, tt.wantVictims, tt.wantPlaced, res.Actions)
			}
			if !placed && len(res.Unplaced) != 1 {
				t.Errorf("unplaced %v, want the incoming workload with a reason", res.Unplaced)
			}
		})
	}
}

func TestPlanRejectsInvalidSnapshot(t *testing.T) {
	snap := &cluster.Snapshot{Nodes: []cluster.Node{node("n1", 1)}, Projects: []cluster.Project{{Name: "a"}},
		Allocations: []cluster.Allocation{running("x", "nope", 0, 0, "n1", 0)}}
	if _, err := Plan(snap, Options{}); !errors.Is(err, cluster.ErrInvalid) {
		t.Errorf("error %v, want cluster.ErrInvalid", err)
	}
}

func TestPlanIsDeterministicAndLeavesSnapshotAlone(t *testing.T) {
	snap := cluster.Synthetic(cluster.SyntheticSpec{Nodes: 200, GPUsPerNode: 8, Allocations: 4000, Projects: 20, Pending: 100, Seed: 3})
	before := slices.Clone(snap.Allocations)
	a, err := Plan(snap, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Plan(snap, Options{})
	if len(a.Actions) == 0 || len(a.Actions) != len(b.Actions) {
		t.Fatalf("%d and %d actions", len(a.Actions), len(b.Actions))
	}
	for i := range a.Actions {
		if a.Actions[i].String() != b.Actions[i].String() {
			t.Fatalf("action %d differs: %v / %v", i, a.Actions[i], b.Actions[i])
		}
	}
	for i := range before {
		if before[i].ID != snap.Allocations[i].ID || before[i].Node != snap.Allocations[i].Node {
			t.Fatal("Plan changed the snapshot")
		}
	}
	var total cluster.Shares
	for _, s := range a.Shares {
		total += s.Deserved
	}
	x, _ := snap.Index()
	if total > x.Capacity {
		t.Errorf("deserved shares add up to %v, capacity %v", total, x.Capacity)
	}
}

// TestNeverVictimsNamedWithReason: a job marked never to be a victim is
// not suspended even above its project's guarantee or limit (where
// non-preemptible work would be), and the result names it with the reason
// so that the status can say why it stays.
func TestNeverVictimsNamedWithReason(t *testing.T) {
	np := running("np", "a", 0, 3, "n1", 2)
	np.Preemptible = false
	snap := &cluster.Snapshot{Nodes: []cluster.Node{node("n1", 3)},
		Projects: []cluster.Project{{Name: "a", HasLimit: true, Limit: 100}, {Name: "b", Guaranteed: 300}},
		Allocations: []cluster.Allocation{
			neverVictim(running("kept", "a", 0, 1, "n1", 0), "its record would exceed 64 KiB"),
			neverVictim(running("vol", "a", 0, 2, "n1", 1), "may not mount host volume data"), np,
		},
		Pending: []cluster.Pending{{Project: "b", Job: "b1", Ask: cluster.Ask{WholeGPUs: 3}, Count: 1, Preemptible: true}}}
	res, err := Plan(snap, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range res.Actions {
		if a.Kind == Suspend && a.Job != "np" {
			t.Errorf("suspended %s, marked never a victim: %v", a.Job, a)
		}
	}
	want := []string{"kept: its record would exceed 64 KiB", "vol: may not mount host volume data"}
	if got := res.Shares[0].NeverVictims; !slices.Equal(got, want) {
		t.Errorf("never victims %q, want %q", got, want)
	}
}

// TestExposedNonPreemptibleWork: the result names the non-preemptible jobs
// that run above their project's guarantee (the newest first past it), so
// that the status can say they count as preemptible.
func TestExposedNonPreemptibleWork(t *testing.T) {
	np := func(id string, start int64, gpu int) cluster.Allocation {
		a := running(id, "a", 0, start, "n1", gpu)
		a.Preemptible = false
		return a
	}
	snap := &cluster.Snapshot{Nodes: []cluster.Node{node("n1", 4)}, Projects: []cluster.Project{{Name: "a", Guaranteed: 150}},
		Allocations: []cluster.Allocation{np("old", 1, 0), np("newer", 2, 1), np("newest", 3, 2), running("pre", "a", 0, 4, "n1", 3)}}
	res, err := Plan(snap, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Shares[0].Exposed; !slices.Equal(got, []string{"newer", "newest"}) {
		t.Errorf("exposed %v, want [newer newest]: old alone is within the guarantee 1.50", got)
	}
}
