package placement

import (
	"math/rand"
	"slices"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// TestFragMemoBounded places many tasks with the fragmentation-aware
// policies on a cluster that sees far more node states than the memo may
// hold, and checks that the memo never grows past its cap and that a
// bounded memo places exactly as an unbounded one does.
func TestFragMemoBounded(t *testing.T) {
	tests := []struct {
		name string
		cap  int
		fill bool
	}{
		{"fgd cap 1", 1, false},
		{"fgd cap 64", 64, false},
		{"gpushare cap 64", 64, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(7))
			c, tasks := openbLikeCluster(rng)
			ref := &Cluster{Nodes: cloneTestNodes(c.Nodes)}
			w := NewWorkload(tasks, DefaultCoverage)
			bounded := newFragMeter(w)
			bounded.fill = tc.fill
			bounded.memoCap = tc.cap
			unbounded := newFragMeter(w)
			unbounded.fill = tc.fill
			unbounded.memoCap = 1 << 30
			var pb, pu Policy = &FGD{frag: bounded}, &FGD{frag: unbounded}
			if tc.fill {
				pb = &GPUShare{frag: bounded, pool: newPools(w)}
				pu = &GPUShare{frag: unbounded, pool: newPools(w)}
			}
			maxLen := 0
			for i := range 2000 {
				task := tasks[rng.Intn(len(tasks))]
				chB, okB := pb.Place(c, task)
				chU, okU := pu.Place(ref, task)
				if okB != okU || chB.Node != chU.Node || !slices.Equal(chB.GPUs, chU.GPUs) {
					t.Fatalf("placement %d: bounded memo chose %+v %v, unbounded %+v %v", i, chB, okB, chU, okU)
				}
				if okB {
					if err := c.Assign(chB, task); err != nil {
						t.Fatal(err)
					}
					if err := ref.Assign(chU, task); err != nil {
						t.Fatal(err)
					}
				}
				maxLen = max(maxLen, len(bounded.memo))
				if i%500 == 499 {
					// Free some capacity so that states keep changing.
					for j := range c.Nodes {
						if rng.Intn(4) == 0 {
							resetNode(&c.Nodes[j])
							resetNode(&ref.Nodes[j])
						}
					}
				}
			}
			if maxLen > tc.cap {
				t.Errorf("memo held %d states, cap %d", maxLen, tc.cap)
			}
			if len(unbounded.memo) <= tc.cap {
				t.Errorf("unbounded memo saw only %d states: the test does not exercise the cap %d", len(unbounded.memo), tc.cap)
			}
		})
	}
}

func cloneTestNodes(nodes []Node) []Node {
	out := make([]Node, len(nodes))
	for i, n := range nodes {
		out[i] = n
		out[i].GPUs = slices.Clone(n.GPUs)
	}
	return out
}

func resetNode(n *Node) {
	n.FreeCPUMilli, n.FreeMemoryMiB = n.CPUMilli, n.MemoryMiB
	for i := range n.GPUs {
		n.GPUs[i].Free = cluster.SharesPerGPU
	}
}
