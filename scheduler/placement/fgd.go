package placement

import "math/rand"

// FGD is Fragmentation Gradient Descent (Weng et al., "Beware of
// Fragmentation", USENIX ATC'23): each task goes to the node, and GPU, where
// the expected fragmentation against the workload grows the least. Exact
// ties are broken at random.
type FGD struct {
	rng  *rand.Rand
	frag *fragMeter
}

// NewFGD returns the FGD policy for workload w, breaking ties with rng.
func NewFGD(rng *rand.Rand, w *Workload) *FGD {
	return &FGD{rng: rng, frag: newFragMeter(w)}
}

// Name implements Policy.
func (*FGD) Name() string { return "fgd" }

// Place implements Policy.
func (p *FGD) Place(c *Cluster, t Task) (Choice, bool) {
	best, ties := -1, 0
	var bestDelta float64
	bestGPU := -1
	for i := range c.Nodes {
		n := &c.Nodes[i]
		if !fitsNode(n, t) {
			continue
		}
		d, gpu := p.frag.bestOnNode(n, t)
		switch {
		case best < 0 || d < bestDelta:
			best, bestDelta, bestGPU, ties = i, d, gpu, 1
		case d == bestDelta:
			ties++
			if p.rng.Intn(ties) == 0 {
				best, bestGPU = i, gpu
			}
		}
	}
	if best < 0 {
		return Choice{}, false
	}
	return choice(c, best, t, bestGPU), true
}
