package placement

import (
	"math"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
)

// pools weighs the free capacity of each GPU model's pool against the
// demand that only some models can serve.
type pools struct {
	// rate is demandRates, computed on the first load.
	rate map[string]float64
	w    *Workload
	free map[string]model.Shares
	// perTask is the GPU demand per arriving task; total the free capacity.
	perTask float64
	total   model.Shares
}

func newPools(w *Workload) *pools {
	return &pools{w: w, free: map[string]model.Shares{}}
}

// load reads the free capacity of each model's pool in c, and on the first
// call the demand rates against the pools' sizes.
func (p *pools) load(c *Cluster) {
	clear(p.free)
	for i := range c.Nodes {
		for _, g := range c.Nodes[i].GPUs {
			p.free[g.Model] += g.Free
		}
	}
	if p.rate == nil {
		p.rate = demandRates(p.w, c)
		for _, t := range p.w.Types {
			p.perTask += t.Weight * float64(model.Shares(t.GPUCount)*t.Shares)
		}
	}
	p.total = 0
	for _, f := range p.free {
		p.total += f
	}
}

// excess is the free capacity of model m's pool left over once the
// constrained demand expected until the cluster is full has taken its part,
// after d more shares land there. "Until the cluster is full" is the free
// capacity over the GPU demand per arriving task, in arriving tasks.
func (p *pools) excess(m string, d model.Shares) float64 {
	h := float64(p.total-d) / p.perTask
	return float64(p.free[m]-d) - p.rate[m]*h
}

// loss is the capacity that placing t on node n is expected to leave unused
// in another pool: the part of t's GPU ask that the excess of n's model's
// pool cannot absorb, less the least that any pool t may use would not
// absorb. It is 0 for a task without GPUs and on a workload without model
// constraints.
func (p *pools) loss(n *Node, t Task) float64 {
	d := t.Demand()
	if d == 0 || p.perTask == 0 || len(n.GPUs) == 0 {
		return 0
	}
	over := func(m string) float64 { return max(0, -p.excess(m, d)) }
	least := math.Inf(1)
	for m := range p.free {
		if t.ModelAllowed(m) {
			least = min(least, over(m))
		}
	}
	return over(n.GPUs[0].Model) - least
}

// demandRates is, per GPU model, the demand per arriving task that
// model-constrained task types bring to its pool: each type's frequency
// times its GPU ask, split over its allowed models in proportion to their
// pools' capacity in c.
func demandRates(w *Workload, c *Cluster) map[string]float64 {
	capacity := map[string]float64{}
	for i := range c.Nodes {
		for _, g := range c.Nodes[i].GPUs {
			capacity[g.Model] += float64(model.SharesPerGPU)
		}
	}
	rate := map[string]float64{}
	for _, t := range w.Types {
		if len(t.Models) == 0 || t.GPUCount == 0 {
			continue
		}
		var sum float64
		for _, m := range t.Models {
			sum += capacity[m]
		}
		if sum == 0 {
			continue
		}
		d := t.Weight * float64(model.Shares(t.GPUCount)*t.Shares)
		for _, m := range t.Models {
			rate[m] += d * capacity[m] / sum
		}
	}
	return rate
}
