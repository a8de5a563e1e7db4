package plan

import (
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// shareOn is a running half-GPU share of project a.
func shareOn(id, nodeName string, gpu int, start int64, movable bool) cluster.Allocation {
	return cluster.Allocation{ID: id, Project: "a", Job: id, Group: "main", Preemptible: true,
		Ask: cluster.Ask{Shares: 50}, Node: nodeName, GPUs: []int{gpu}, Start: start, Movable: movable}
}

// TestConsolidationBudget: three whole-GPU jobs of b fit nowhere; each
// fits once one movable share of a moves (three nodes of two GPUs, each
// holding two shares, one movable, and a node with one share's room on
// each of its three GPUs). Options.MaxMoves bounds how many move.
func TestConsolidationBudget(t *testing.T) {
	snap := cluster.Snapshot{
		Nodes:    []cluster.Node{node("n1", 2), node("n2", 2), node("n3", 2), node("spare", 3)},
		Projects: []cluster.Project{{Name: "a", Guaranteed: 1000}, {Name: "b"}},
	}
	for i, n := range []string{"n1", "n2", "n3"} {
		snap.Allocations = append(snap.Allocations, shareOn(n+"-fixed", n, 0, int64(i), false), shareOn(n+"-mv", n, 1, int64(i), true))
	}
	for g := range 3 {
		snap.Allocations = append(snap.Allocations, shareOn("spare-"+string(rune('0'+g)), "spare", g, 9, false))
	}
	for _, id := range []string{"b1", "b2", "b3"} {
		snap.Pending = append(snap.Pending, cluster.Pending{Project: "b", Job: id, Group: "main", Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, Preemptible: true})
	}
	tests := []struct {
		maxMoves   int
		wantMoved  int
		wantPlaced int
		// wantHeld: b3, left waiting, is held from the rooms the
		// moves make (HoldReason).
		wantHeld int
	}{
		{maxMoves: -1, wantMoved: 0, wantPlaced: 0},
		{maxMoves: 2, wantMoved: 2, wantPlaced: 2, wantHeld: 1},
		{maxMoves: 0, wantMoved: 3, wantPlaced: 3}, // DefaultMaxMoves is 4
	}
	for _, tt := range tests {
		res, err := Plan(&snap, Options{MaxMoves: tt.maxMoves})
		if err != nil {
			t.Fatal(err)
		}
		moved, placed, held := 0, 0, 0
		for _, a := range res.Actions {
			switch {
			case a.Kind == Suspend && strings.HasPrefix(a.Reason, HoldReason):
				held++
			case a.Kind == Suspend && strings.HasPrefix(a.Reason, "moved to make room for b"):
				moved++
				if a.Cause != CauseMove {
					t.Errorf("MaxMoves %d: move of %s has cause %s", tt.maxMoves, a.Job, a.Cause)
				}
				if !strings.HasSuffix(a.Job, "-mv") {
					t.Errorf("MaxMoves %d: moved %s, which did not opt in", tt.maxMoves, a.Job)
				}
			case a.Kind == Suspend:
				t.Errorf("MaxMoves %d: suspended %s: %s", tt.maxMoves, a.Job, a.Reason)
			case a.Kind == Place:
				placed++
			}
		}
		if moved != tt.wantMoved || placed != tt.wantPlaced || held != tt.wantHeld {
			t.Errorf("MaxMoves %d: moved %d, placed %d and held %d, want %d, %d and %d", tt.maxMoves, moved, placed, held, tt.wantMoved, tt.wantPlaced, tt.wantHeld)
		}
	}
}

// TestSuspendSaysWhetherItRestoresAGuarantee: a reclaim for work within
// its project's guarantee is marked ForGuarantee (the actuator's holds
// give way to it); a reclaim for a deserved share above the guarantee is
// not.
func TestSuspendSaysWhetherItRestoresAGuarantee(t *testing.T) {
	for _, tt := range []struct {
		name       string
		guaranteed cluster.Shares
		want       bool
	}{
		{"within the guarantee", 100, true},
		{"within the deserved share only", 0, false},
	} {
		snap := cluster.Snapshot{
			Nodes:       []cluster.Node{node("n1", 2)},
			Projects:    []cluster.Project{{Name: "a", OverQuotaWeight: 1}, {Name: "b", Guaranteed: tt.guaranteed, OverQuotaWeight: 1}},
			Allocations: []cluster.Allocation{running("a1", "a", 0, 1, "n1", 0), running("a2", "a", 0, 2, "n1", 1)},
			Pending:     []cluster.Pending{{Project: "b", Job: "b1", Group: "main", Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, Preemptible: true}},
		}
		res, err := Plan(&snap, Options{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, a := range res.Actions {
			if a.Kind == Suspend {
				found = true
				if a.ForGuarantee != tt.want {
					t.Errorf("%s: suspension %v has ForGuarantee %v, want %v", tt.name, a, a.ForGuarantee, tt.want)
				}
			}
		}
		if !found {
			t.Errorf("%s: no suspension in %v", tt.name, res.Actions)
		}
	}
}
