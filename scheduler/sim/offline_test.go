package sim

import (
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// recorder places with p and records the tasks it is asked to place.
type recorder struct {
	p     placement.Policy
	asked []placement.Task
}

func (r *recorder) Name() string       { return r.p.Name() }
func (r *recorder) SamplesNodes() bool { return false }
func (r *recorder) Place(c *placement.Cluster, t placement.Task) (placement.Choice, bool) {
	r.asked = append(r.asked, t)
	return r.p.Place(c, t)
}

func TestOffline(t *testing.T) {
	share60 := placement.Task{CPUMilli: 1000, GPUCount: 1, Shares: 60}
	share30 := placement.Task{CPUMilli: 1000, GPUCount: 1, Shares: 30}
	whole2 := placement.Task{CPUMilli: 1000, GPUCount: 2, Shares: 100}
	tests := []struct {
		name  string
		nodes []placement.Node
		tasks []placement.Task
		// wantAsked is the number of tasks placed (all that arrive until
		// 100%); wantUnalloc the unallocated % after them.
		wantAsked   int
		wantUnalloc float64
		// wantFirst, when set, is the task placed first.
		wantFirst placement.Task
	}{
		{
			// 0.6-GPU shares: four arrive until 100% of 2 GPUs, two fit.
			name:  "shares strand slivers",
			nodes: []placement.Node{gpuNode("a", 1), gpuNode("b", 1)},
			tasks: []placement.Task{share60}, wantAsked: 4, wantUnalloc: 40,
		},
		{
			// Whatever the arrival order, the two-GPU task goes first,
			// onto an empty node; the shares fill the other.
			name:      "largest first",
			nodes:     []placement.Node{gpuNode("a", 2), gpuNode("b", 2)},
			tasks:     []placement.Task{share30, share30, share30, share30, share30, share30, whole2},
			wantFirst: whole2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for seed := int64(1); seed <= 5; seed++ {
				p, err := placement.ByName("bestfit", seed)
				if err != nil {
					t.Fatal(err)
				}
				rec := &recorder{p: p}
				res, err := Offline(Config{Nodes: tc.nodes, Tasks: tc.tasks, Policy: rec, Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				for i := 1; i < len(rec.asked); i++ {
					if rec.asked[i].Demand() > rec.asked[i-1].Demand() {
						t.Fatalf("seed %d: task %d (%v) placed before a larger one", seed, i, rec.asked)
					}
				}
				if tc.wantAsked > 0 && (len(rec.asked) != tc.wantAsked || res.UnallocAtRead != tc.wantUnalloc) {
					t.Errorf("seed %d: placed %d tasks, unallocated %.1f%%; want %d, %.1f%%",
						seed, len(rec.asked), res.UnallocAtRead, tc.wantAsked, tc.wantUnalloc)
				}
				if tc.wantFirst.GPUCount > 0 && (rec.asked[0].Demand() != tc.wantFirst.Demand() || res.Placed == 0) {
					t.Errorf("seed %d: first placed %v (placed %d), want %v placed", seed, rec.asked[0], res.Placed, tc.wantFirst)
				}
			}
		})
	}
}
