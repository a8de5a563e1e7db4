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

// loss is the capacity that placing t on node n is expected to leave unused
// in another pool: the part of t's GPU ask that the excess of the pool of
// n's first GPU cannot absorb, less the least that any pool t may use would
// not absorb. It is 0 for a task without GPUs and on a workload without
// model constraints.
func (p *pools) loss(n *Node, t Task) float64 {
	d := t.Demand()
	if d == 0 || p.perTask == 0 || len(n.GPUs) == 0 {
		return 0
	}
	over := func(k poolKey) float64 { return max(0, -p.excess(k, d)) }
	least := math.Inf(1)
	for k := range p.free {
		if t.MayUse(k.model, k.mode) {
			least = min(least, over(k))
		}
	}
	return over(poolKey{n.GPUs[0].Model, n.GPUs[0].Mode}) - least
}

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
