package sim

import (
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// TestRunConsolidates runs half-GPU shares and whole GPUs placed at
// random: shares spread over the GPUs strand the whole ones, and moving
// movable shares together places whole GPUs that failed without it. The
// same seed gives the same run.
func TestRunConsolidates(t *testing.T) {
	nodes := []placement.Node{gpuNode("a", 4), gpuNode("b", 4), gpuNode("c", 4)}
	tasks := []placement.Task{{CPUMilli: 1000, GPUCount: 1, Shares: 50}, {CPUMilli: 1000, GPUCount: 1, Shares: 100}}
	run := func(seed int64, movable float64) Result {
		t.Helper()
		p, _ := placement.ByName("random", seed)
		r, err := Run(Config{Nodes: nodes, Tasks: tasks, Policy: p, Seed: seed, Movable: movable})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var without, with, moves int
	for seed := range int64(10) {
		base, cons := run(seed, 0), run(seed, 1)
		if again := run(seed, 1); again != cons {
			t.Fatalf("seed %d: two runs differ: %+v and %+v", seed, cons, again)
		}
		if base.Moves != 0 || base.Consolidated != 0 {
			t.Fatalf("seed %d: moves without movable tasks: %+v", seed, base)
		}
		if cons.Arrived != base.Arrived {
			t.Fatalf("seed %d: arrivals differ with consolidation: %d and %d", seed, cons.Arrived, base.Arrived)
		}
		without, with, moves = without+base.Placed, with+cons.Placed, moves+cons.Moves
	}
	if moves == 0 || with <= without {
		t.Fatalf("consolidation placed %d tasks with %d moves, against %d without", with, moves, without)
	}
}
