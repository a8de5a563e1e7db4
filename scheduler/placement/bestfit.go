package placement

import (
	"math/rand"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// Normalizers of the Best-Fit score: the largest node's CPU and GPU
// capacity in the paper's cluster (128 cores, 8 GPUs).
const (
	bestFitMaxCPUMilli = 128000
	bestFitMaxShares   = 8 * cluster.SharesPerGPU
)

// BestFit is the Best-Fit baseline of the "Beware of Fragmentation" paper
// (ATC'23). Each feasible node scores
//
//	0.5*(freeCPU-ask)/128 cores + 0.5*(freeGPU-ask)/8 GPUs
//
// (lower is better), turned into an integer out of 100, so near ties are
// common; ties are broken at random. Inside the node a share goes to the
// tightest GPU that fits, whole GPUs to the lowest-numbered idle ones.
// Memory is a hard limit but is not scored.
type BestFit struct {
	rng *rand.Rand
}

// NewBestFit returns the Best-Fit policy breaking ties with rng.
func NewBestFit(rng *rand.Rand) *BestFit { return &BestFit{rng: rng} }

// Name implements Policy.
func (*BestFit) Name() string { return "bestfit" }

// SamplesNodes implements Policy: it scores every node it is shown.
func (*BestFit) SamplesNodes() bool { return false }

// bestFitScore is the paper's node score, higher is better: the weighted
// slack left after placing t, reversed and truncated to an integer in
// [0,100].
func bestFitScore(n *Node, t Task) int64 {
	cpu := float64(n.FreeCPUMilli-t.CPUMilli) / bestFitMaxCPUMilli
	gpu := float64(freeShares(n)-t.Demand()) / bestFitMaxShares
	s := 0.5*cpu + 0.5*gpu
	return int64((1 - s) * 100)
}

// Place implements Policy.
func (p *BestFit) Place(c *Cluster, t Task) (Choice, bool) {
	best, ties := -1, 0
	var bestScore int64
	for i := range c.Nodes {
		n := &c.Nodes[i]
		if !fitsNode(n, t) {
			continue
		}
		s := bestFitScore(n, t)
		switch {
		case best < 0 || s > bestScore:
			best, bestScore, ties = i, s, 1
		case s == bestScore:
			// Reservoir sampling: each tied node wins with equal chance.
			ties++
			if p.rng.Intn(ties) == 0 {
				best = i
			}
		}
	}
	if best < 0 {
		return Choice{}, false
	}
	n := &c.Nodes[best]
	if !isShare(t) {
		return Choice{Node: best, GPUs: lowestGPUs(n, t)}, true
	}
	return Choice{Node: best, GPUs: []int{tightestGPU(n, t)}}, true
}

// tightestGPU is the fitting GPU of n with the least free capacity (lowest
// index among equals), or -1.
func tightestGPU(n *Node, t Task) int {
	g := -1
	for i := range n.GPUs {
		f := n.GPUs[i].Free
		if f >= t.Shares && t.MayUse(n.GPUs[i].Model, n.GPUs[i].Mode) && (g < 0 || f < n.GPUs[g].Free) {
			g = i
		}
	}
	return g
}
