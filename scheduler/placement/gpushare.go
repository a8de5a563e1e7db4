package placement

import "math/rand"

// GPUShare is gpushare's own fragmentation-aware placement policy. Like FGD
// it places each task where a fragmentation measure against the workload
// grows the least, but its measure adds to FGD's a second one that looks
// further ahead: for each task type it asks how much of the node's free GPU capacity would still be left if
// tasks of that type alone kept arriving until none fit, counting every
// limit: GPU capacity (partial GPUs for whole-GPU types, leftover slivers
// for shares), CPU and memory (free GPUs the free CPU or memory cannot
// feed; a type's memory ask is the mean of its tasks'). FGD sees a GPU
// stranded by CPU only once the CPU left is below one task's ask; this
// measure sees it as soon as the CPU left cannot feed all the free GPUs,
// which steers CPU-heavy work to CPU-rich nodes early.
//
// The added measure, summed over types weighted by frequency, is
//
//	sum_t w_t * (freeGPU - k_t * gpuAsk_t),  k_t = min(fitByGPU_t, freeCPU/cpuAsk_t, freeMem/memAsk_t)
//
// FGD's one-step term keeps its sharp view of GPUs a single task cannot use;
// the fill term adds the CPU and memory view. Together they do better on the
// openb traces than either alone.
//
// Exact ties between nodes are broken at random.
type GPUShare struct {
	rng  *rand.Rand
	frag *fragMeter
}

// NewGPUShare returns the gpushare policy for workload w, breaking ties
// with rng.
func NewGPUShare(rng *rand.Rand, w *Workload) *GPUShare {
	f := newFragMeter(w)
	f.fill = true
	return &GPUShare{rng: rng, frag: f}
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
