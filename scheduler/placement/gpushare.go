package placement

import (
	"math/rand"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// GPUShare is gpushare's own fragmentation-aware placement policy: FGD's
// decision wherever FGD sees a difference in how a node's GPUs fit the
// workload's task shapes, weighing what a placement costs the GPU models
// that model-constrained work needs, and a look-ahead that also counts CPU
// and memory where FGD sees no difference.
//
// Each candidate (a node and, for a share, a GPU on it) is ranked by, in
// order:
//
//  1. FGD's score of the expected capacity the placement wastes: the
//     growth of the FGD measure against the workload plus the pool loss
//     (pools.loss), turned into the paper simulator's integer score
//     (fgdScore). Higher wins. Integer scores tie often: growths within a
//     few hundredths of a GPU of each other are one score.
//     Two changes to FGD's measure, both only where tasks ask for GPU
//     models. A type counts only the GPUs of models it may use: FGD counts
//     a node's whole free capacity as fragmented for a type that may not
//     use the node's model, which sends other work to the models that
//     constrained tasks ask for most, however large their pools are. And
//     the pool loss, in the same unit (shares): the part of the task's GPU
//     ask that its model's pool cannot spare, once the demand that only
//     some models can serve has taken its expected part of the pool until
//     the cluster is full, less the least any pool the task may use would
//     lose; it is capacity expected to stay unused in another pool.
//  2. Among equal scores, the growth of the fill measure (computeFill): the
//     free GPU capacity each GPU task type would leave behind if tasks of
//     that type alone kept arriving until none fit, by GPU, CPU or memory.
//     FGD sees a GPU stranded by CPU only once the CPU left is below one
//     task's ask; fill sees it as soon as the CPU (or memory) left cannot
//     feed all the free GPUs, which steers CPU-heavy work to CPU-rich nodes
//     early. Lower wins.
//  3. Then the first candidate in cluster order, as FGD does: it packs work
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
	// res, when not nil, adds the multi-GPU reserve's loss to the pool
	// loss (the gpushare-reserve policy).
	res *reserve
	// before and after are scratch: a node's GPUs' free capacities before
	// and after a candidate placement.
	before, after []cluster.Shares
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

// NewGPUShareReserve returns the gpushare-reserve policy for workload w:
// gpushare with the multi-GPU reserve (reserve.go) weighed in step 1 of
// the ranking, beside the pool loss. It keeps the nodes that the largest
// multi-GPU tasks need while fewer are left than such tasks are expected
// until the cluster is full, which FGD's measure does not see when those
// tasks are rare. When the cluster it is shown carries Pools (a bounded
// search shows candidates only), the reserve weighs nothing and the policy
// places as gpushare does.
func NewGPUShareReserve(rng *rand.Rand, w *Workload) *GPUShare {
	p := NewGPUShare(rng, w)
	p.res = newReserve(w)
	return p
}

// Name implements Policy.
func (p *GPUShare) Name() string {
	if p.res != nil {
		return "gpushare-reserve"
	}
	return "gpushare"
}

// SamplesNodes implements Policy: it scores every node it is shown.
func (*GPUShare) SamplesNodes() bool { return false }

// rank is a candidate's place in the GPUShare order.
type rank struct {
	score int64
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
	return a.fill < b.fill
}

// rankOf is the rank of a growth of fragmentation d with the pool loss.
func rankOf(d fragValue, loss float64) rank {
	return rank{score: fgdScore(d.fgd + loss), fill: d.fill, growth: d}
}

// Place implements Policy.
func (p *GPUShare) Place(c *Cluster, t Task) (Choice, bool) {
	best, bestGPU := -1, -1
	var bestRank rank
	p.pool.load(c)
	if p.res != nil {
		p.res.load(c, p.before)
	}
	loss := p.pool.lossOf(t)
	for i := range c.Nodes {
		n := &c.Nodes[i]
		if !fitsNode(n, t) {
			continue
		}
		r, gpu := p.bestOnNode(n, t, loss.at(n))
		if best < 0 || r.better(bestRank) {
			best, bestRank, bestGPU = i, r, gpu
		}
	}
	if best < 0 {
		return Choice{}, false
	}
	return choice(c, best, t, bestGPU), true
}

// bestOnNode is the best rank of t on node n (which must fit t), given the
// pool loss of placing it there, and, for a share, the first GPU that
// achieves it (-1 otherwise). A share tries one GPU per distinct free
// capacity; whole GPUs take the lowest-numbered idle ones, as idle GPUs
// are alike.
func (p *GPUShare) bestOnNode(n *Node, t Task, loss float64) (rank, int) {
	f := p.frag
	before := f.current(n)
	if !isShare(t) {
		return rankOf(f.afterWhole(n, t).minus(before), loss+p.reserveLoss(n, t, -1)), -1
	}
	var best rank
	bestGPU := -1
	for g := range n.GPUs {
		if !f.shareCandidate(n, t, g) {
			continue
		}
		if r := rankOf(f.afterShare(n, t, g).minus(before), loss+p.reserveLoss(n, t, g)); bestGPU < 0 || r.better(best) {
			best, bestGPU = r, g
		}
	}
	return best, bestGPU
}

// reserveLoss is the reserve's loss of placing t on n: on GPU g for a
// share, else on the lowest-numbered GPUs that fit. It is 0 without the
// reserve.
func (p *GPUShare) reserveLoss(n *Node, t Task, g int) float64 {
	if p.res == nil || !p.res.active() {
		return 0
	}
	p.before, p.after = p.before[:0], p.after[:0]
	for i := range n.GPUs {
		p.before = append(p.before, n.GPUs[i].Free)
	}
	p.after = append(p.after, p.before...)
	if g >= 0 {
		p.after[g] -= t.Shares
	} else {
		k := t.GPUCount
		for i := range n.GPUs {
			if k > 0 && p.after[i] >= t.Shares && t.MayUse(n.GPUs[i].Model, n.GPUs[i].Mode) {
				p.after[i] -= t.Shares
				k--
			}
		}
	}
	return p.res.loss(n, t, p.before, p.after)
}
