package placement

import (
	"math"
	"math/rand"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// FGD is Fragmentation Gradient Descent (Weng et al., "Beware of
// Fragmentation", USENIX ATC'23): each task goes to the node, and GPU, where
// the expected fragmentation against the workload grows the least.
//
// It scores as the paper's simulator does, so that it reproduces the
// published figures: a candidate's growth of fragmentation d (in GPUs)
// becomes the integer score int(100 * sigmoid(-d)), the scheduler's
// 0-100 node score; the highest score wins and equal scores go to the
// first candidate in cluster order (the first GPU of the node for a share,
// the first node of the cluster). Integer scores make near ties common, and
// taking the first of them packs work onto the same nodes rather than
// spreading it at random, which on the openb traces matters by several
// points of unallocated GPU.
type FGD struct {
	frag *fragMeter
}

// NewFGD returns the FGD policy for workload w. FGD breaks ties by order,
// so it draws nothing from rng; the parameter keeps the constructors alike.
func NewFGD(_ *rand.Rand, w *Workload) *FGD {
	return &FGD{frag: newFragMeter(w)}
}

// Name implements Policy.
func (*FGD) Name() string { return "fgd" }

// SamplesNodes implements Policy: it scores every node it is shown.
func (*FGD) SamplesNodes() bool { return false }

// fgdScore turns a growth of fragmentation (shares) into the paper
// simulator's integer node score: 100 * sigmoid(-delta in GPUs), truncated.
func fgdScore(delta float64) int64 {
	return int64(100 / (1 + math.Exp(delta/cluster.SharesPerGPU)))
}

// Place implements Policy.
func (p *FGD) Place(c *Cluster, t Task) (Choice, bool) {
	best, bestGPU := -1, -1
	var bestScore int64
	for i := range c.Nodes {
		n := &c.Nodes[i]
		if !fitsNode(n, t) {
			continue
		}
		s, gpu := p.scoreOnNode(n, t)
		if best < 0 || s > bestScore {
			best, bestScore, bestGPU = i, s, gpu
		}
	}
	if best < 0 {
		return Choice{}, false
	}
	return choice(c, best, t, bestGPU), true
}

// scoreOnNode is the best score of t on node n (which must fit t) and, for a
// share, the first GPU that achieves it (-1 otherwise).
func (p *FGD) scoreOnNode(n *Node, t Task) (int64, int) {
	f := p.frag
	before := f.current(n).fgd
	if !isShare(t) {
		return fgdScore(f.afterWhole(n, t).fgd - before), -1
	}
	var best int64
	bestGPU := -1
	for g := range n.GPUs {
		if !f.shareCandidate(n, t, g) {
			continue
		}
		if s := fgdScore(f.afterShare(n, t, g).fgd - before); bestGPU < 0 || s > best {
			best, bestGPU = s, g
		}
	}
	return best, bestGPU
}
