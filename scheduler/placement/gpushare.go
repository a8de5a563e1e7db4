package placement

import "math/rand"

// GPUShare is gpushare's own placement policy. Placeholder: FGD until tuned.
type GPUShare struct {
	rng  *rand.Rand
	frag *fragMeter
}

// NewGPUShare returns the gpushare policy for workload w, breaking ties
// with rng.
func NewGPUShare(rng *rand.Rand, w *Workload) *GPUShare {
	return &GPUShare{rng: rng, frag: newFragMeter(w)}
}

// Name implements Policy.
func (*GPUShare) Name() string { return "gpushare" }

// Place implements Policy.
func (p *GPUShare) Place(c *Cluster, t Task) (Choice, bool) {
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
