package placement

import (
	"maps"
	"math"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// poolKey names a pool: a GPU model in one mode.
type poolKey struct {
	model string
	mode  cluster.Mode
}

// pools weighs the free capacity of each GPU pool (model and mode) against
// the demand that only some models can serve.
type pools struct {
	w *Workload
	// free is each pool's free capacity and gpus its size, from the
	// cluster of the current placement (Cluster.Pools, else its nodes).
	free map[poolKey]cluster.Shares
	gpus map[poolKey]int
	// rate is demandRates for the pool sizes sized (recomputed when the
	// sizes change).
	rate  map[poolKey]float64
	sized map[poolKey]int
	// perTask is the GPU demand per arriving task; total the free capacity.
	perTask float64
	total   cluster.Shares
}

func newPools(w *Workload) *pools {
	p := &pools{w: w, free: map[poolKey]cluster.Shares{}, gpus: map[poolKey]int{}}
	for _, t := range w.Types {
		p.perTask += t.Weight * float64(cluster.Shares(t.GPUCount)*t.Shares)
	}
	return p
}

// load reads the size and free capacity of each pool of c: c.Pools when
// c carries them (its nodes are candidates from a larger cluster), else
// its nodes' GPUs; and the demand rates against the pools' sizes.
func (p *pools) load(c *Cluster) {
	clear(p.free)
	clear(p.gpus)
	if c.Pools != nil {
		for _, pl := range c.Pools {
			k := poolKey{pl.Model, pl.Mode}
			p.free[k] += pl.Free
			p.gpus[k] += pl.GPUs
		}
	} else {
		for i := range c.Nodes {
			for _, g := range c.Nodes[i].GPUs {
				k := poolKey{g.Model, g.Mode}
				p.free[k] += g.Free
				p.gpus[k]++
			}
		}
	}
	if p.rate == nil || !maps.Equal(p.sized, p.gpus) {
		p.rate = demandRates(p.w, p.gpus)
		p.sized = maps.Clone(p.gpus)
	}
	p.total = 0
	for _, f := range p.free {
		p.total += f
	}
}

// excess is the free capacity of pool k left over once the constrained
// demand expected until the cluster is full has taken its part, after d
// more shares land there. "Until the cluster is full" is the free
// capacity over the GPU demand per arriving task, in arriving tasks.
func (p *pools) excess(k poolKey, d cluster.Shares) float64 {
	h := float64(p.total-d) / p.perTask
	return float64(p.free[k]-d) - p.rate[k]*h
}

// poolLoss is the pool loss of one task: the capacity that placing it on a
// node is expected to leave unused in another pool, which is the part of
// its GPU ask that the excess of the pool of the node's first GPU cannot
// absorb, less the least that any pool the task may use would not absorb.
// It is 0 for a task without GPUs and on a workload without model
// constraints. What does not depend on the node is worked out once
// (lossOf): a placement weighs one task on thousands of nodes of a few
// pools.
type poolLoss struct {
	p *pools
	// none marks a task that loses nothing anywhere (no GPUs, no demand).
	none  bool
	d     cluster.Shares
	least float64
	// over is each pool's loss; a cluster has few pools, so a node's is
	// found by a linear search rather than hashing its model.
	over []poolOver
}

type poolOver struct {
	key  poolKey
	over float64
}

// lossOf is the pool loss of t on the pools as last loaded.
func (p *pools) lossOf(t Task) poolLoss {
	d := t.Demand()
	if d == 0 || p.perTask == 0 {
		return poolLoss{none: true}
	}
	l := poolLoss{p: p, d: d, least: math.Inf(1), over: make([]poolOver, 0, len(p.free))}
	for k := range p.free {
		o := p.over(k, d)
		l.over = append(l.over, poolOver{key: k, over: o})
		if t.MayUse(k.model, k.mode) {
			l.least = min(l.least, o)
		}
	}
	return l
}

// at is the pool loss of placing the task on n.
func (l *poolLoss) at(n *Node) float64 {
	if l.none || len(n.GPUs) == 0 {
		return 0
	}
	k := poolKey{n.GPUs[0].Model, n.GPUs[0].Mode}
	for i := range l.over {
		if l.over[i].key == k {
			return l.over[i].over - l.least
		}
	}
	return l.p.over(k, l.d) - l.least
}

// over is the part of d shares landing in pool k that its excess cannot
// absorb.
func (p *pools) over(k poolKey, d cluster.Shares) float64 { return max(0, -p.excess(k, d)) }

// demandRates is, per pool, the demand per arriving task that
// model-constrained task types bring to it: each type's frequency times
// its GPU ask, split over the pools of its allowed models in proportion to
// their sizes (gpus).
func demandRates(w *Workload, gpus map[poolKey]int) map[poolKey]float64 {
	rate := map[poolKey]float64{}
	for _, t := range w.Types {
		if len(t.Models) == 0 || t.GPUCount == 0 {
			continue
		}
		var sum float64
		for k, n := range gpus {
			if slices.Contains(t.Models, k.model) {
				sum += float64(n * cluster.SharesPerGPU)
			}
		}
		if sum == 0 {
			continue
		}
		d := t.Weight * float64(cluster.Shares(t.GPUCount)*t.Shares)
		for k, n := range gpus {
			if slices.Contains(t.Models, k.model) {
				rate[k] += d * float64(n*cluster.SharesPerGPU) / sum
			}
		}
	}
	return rate
}
