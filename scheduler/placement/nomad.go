package placement

import (
	"math"
	"math/rand"
)

// This file models how Nomad 1.11 chooses a node for a task group
// (scheduler/feasible/stack.go GenericStack, select.go LimitIterator and
// MaxScoreIterator, rank.go BinPackIterator and ScoreNormalizationIterator,
// nomad/structs/funcs.go ScoreFitBinPack):
//
//   - The nodes are shuffled for each placement, and only the first few
//     feasible ones are scored: 2 for a batch job ("power of two choices"),
//     ceil(log2(nodes)) for a service job (at least 2), and 100 (or the
//     group's count, if larger) when the group has a node affinity or a
//     spread. A device affinity does not raise the limit.
//   - Each scored node gets the mean of its scores: the bin-pack fit on CPU
//     and memory (GPUs do not count), the node affinity score when the job
//     has affinities, and the device affinity score when its device request
//     has affinities. The highest mean wins; ties go to the node met first
//     in the shuffled order.

// Nomad's scored-node limits.
const (
	nomadBatchLimit    = 2
	nomadAffinityLimit = 100
)

// JobType is the Nomad scheduler a task is submitted with; it decides how
// many feasible nodes Nomad scores.
type JobType int

const (
	// Batch jobs: Nomad scores 2 feasible nodes.
	Batch JobType = iota
	// Service jobs: Nomad scores ceil(log2(nodes)) feasible nodes.
	Service
)

// nomadLimit is the number of feasible nodes Nomad scores for a job of
// type jt on a cluster of n nodes, with or without node affinities.
func nomadLimit(jt JobType, n int, affinity bool) int {
	if affinity {
		return nomadAffinityLimit
	}
	limit := nomadBatchLimit
	if jt == Service && n > 0 {
		limit = max(limit, int(math.Ceil(math.Log2(float64(n)))))
	}
	return limit
}

// binPackFit is Nomad's bin-pack score of placing t on n, normalized to
// [0, 1] as the BinPackIterator does (ScoreFitBinPack / 18): with the free
// shares of CPU and memory left after the placement,
// 20 - (10^freeCPU + 10^freeMem), clamped to [0, 18].
func binPackFit(n *Node, t Task) float64 {
	freeCPU, freeMem := 0.0, 0.0
	if n.CPUMilli > 0 {
		freeCPU = float64(n.FreeCPUMilli-t.CPUMilli) / float64(n.CPUMilli)
	}
	if n.MemoryMiB > 0 {
		freeMem = float64(n.FreeMemoryMiB-t.MemoryMiB) / float64(n.MemoryMiB)
	}
	score := 20 - (math.Pow(10, freeCPU) + math.Pow(10, freeMem))
	return min(max(score, 0), 18) / 18
}

// nodeSampler draws the nodes of a cluster in a fresh random order for each
// placement, lazily: a Fisher-Yates shuffle that stops as soon as the caller
// has what it needs. The permutation carries over between placements, which
// keeps every draw uniform.
type nodeSampler struct {
	rng  *rand.Rand
	perm []int
}

// each calls visit with node indexes in random order until visit returns
// false or every node was visited.
func (s *nodeSampler) each(n int, visit func(i int) bool) {
	if len(s.perm) != n {
		s.perm = make([]int, n)
		for i := range s.perm {
			s.perm[i] = i
		}
	}
	for i := 0; i < n; i++ {
		j := i + s.rng.Intn(n-i)
		s.perm[i], s.perm[j] = s.perm[j], s.perm[i]
		if !visit(s.perm[i]) {
			return
		}
	}
}
