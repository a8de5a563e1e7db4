package placement

import "math/rand"

// GPUShare is gpushare's own fragmentation-aware placement policy: FGD's
// decision wherever FGD sees a difference in how a node's GPUs fit the
// workload's task shapes, the scarcity of GPU models where tasks ask for
// models, and a look-ahead that also counts CPU and memory where FGD sees
// no difference.
//
// Each candidate (a node and, for a share, a GPU on it) is ranked by, in
// order:
//
//  1. FGD's score: the growth of the FGD measure against the workload,
//     turned into the paper simulator's integer score (fgdScore). Higher
//     wins. Integer scores tie often: growths within a few hundredths of
//     a GPU of each other are one score. One change to FGD's measure: a
//     type counts only the GPUs of models it may use. FGD counts a node's
//     whole free capacity as fragmented for a type that may not use the
//     node's model, which rewards putting other work on the models that
//     constrained tasks ask for most, however large their pools are.
//  2. The slack of the GPU model's pool after the placement (pools): its
//     free capacity over the demand per arriving task that only some
//     models can serve (model-constrained task types), that is how long
//     the pool could serve that demand alone. Higher wins, so work that
//     may go anywhere fills the pools that constrained work needs least.
//     Without model constraints every pool's slack is infinite.
//  3. The growth of the fill measure (computeFill): the free GPU capacity
//     each GPU task type would leave behind if tasks of that type alone
//     kept arriving until none fit, by GPU, CPU or memory. FGD sees a GPU
//     stranded by CPU only once the CPU left is below one task's ask; fill
//     sees it as soon as the CPU (or memory) left cannot feed all the free
//     GPUs, which steers CPU-heavy work to CPU-rich nodes early. Lower
//     wins.
//  4. Then the first candidate in cluster order, as FGD does: it packs work
//     onto the nodes already in use and keeps the others idle for large
//     tasks.
//
// Everything the ranking weighs comes from the workload (task types, their
// frequencies and model constraints) and the cluster: the policy has no
// tuned constants. On a workload without model constraints it places as
// FGD does wherever FGD's scores differ, and chooses among FGD's ties with
// more information than FGD's cluster order.
type GPUShare struct {
	frag *fragMeter
	pool *pools
}

// NewGPUShare returns the gpushare policy for workload w. It breaks ties by
// order, so it draws nothing from rng; the parameter keeps the
// constructors alike.
func NewGPUShare(_ *rand.Rand, w *Workload) *GPUShare {
	f := newFragMeter(w)
	f.fill = true
	f.byModel = true
	return &GPUShare{frag: f, pool: newPools(w)}
}

// Name implements Policy.
func (*GPUShare) Name() string { return "gpushare" }

// rank is a candidate's place in the GPUShare order.
type rank struct {
	score int64
	slack float64
	fill  float64
	// growth is the growth of fragmentation by both measures, which the
	// ranking mechanism publishes.
	growth fragValue
}

// better reports whether a ranks strictly before b.
func (a rank) better(b rank) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	if a.slack != b.slack {
		return a.slack > b.slack
	}
	return a.fill < b.fill
}

// rankOf is the rank of a growth of fragmentation.
func rankOf(d fragValue) rank { return rank{score: fgdScore(d.fgd), fill: d.fill, growth: d} }

// Place implements Policy.
func (p *GPUShare) Place(c *Cluster, t Task) (Choice, bool) {
	best, bestGPU := -1, -1
	var bestRank rank
	p.pool.load(c)
	for i := range c.Nodes {
		n := &c.Nodes[i]
		if !fitsNode(n, t) {
			continue
		}
		r, gpu := p.bestOnNode(n, t)
		r.slack = p.pool.slackAfter(n, t)
		if best < 0 || r.better(bestRank) {
			best, bestRank, bestGPU = i, r, gpu
		}
	}
	if best < 0 {
		return Choice{}, false
	}
	return choice(c, best, t, bestGPU), true
}

// bestOnNode is the best rank of t on node n (which must fit t) and, for a
// share, the first GPU that achieves it (-1 otherwise). A share tries one
// GPU per distinct free capacity; whole GPUs take the lowest-numbered idle
// ones, as idle GPUs are alike.
func (p *GPUShare) bestOnNode(n *Node, t Task) (rank, int) {
	f := p.frag
	before := f.current(n)
	if !isShare(t) {
		return rankOf(f.afterWhole(n, t).minus(before)), -1
	}
	var best rank
	bestGPU := -1
	for g := range n.GPUs {
		if !f.shareCandidate(n, t, g) {
			continue
		}
		if r := rankOf(f.afterShare(n, t, g).minus(before)); bestGPU < 0 || r.better(best) {
			best, bestGPU = r, g
		}
	}
	return best, bestGPU
}
