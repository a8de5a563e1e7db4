package placement

import (
	"math"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
)

// pools is the scarcity of each GPU model: the free capacity of its pool
// against the demand that only some models can serve.
type pools struct {
	// rate is demandRates, computed on the first load.
	rate map[string]float64
	w    *Workload
	free map[string]model.Shares
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
	}
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

// slackAfter is how long (in arriving tasks) the pool of n's model would
// serve its constrained demand alone once t is placed there: +Inf for a
// model no constrained type asks for, or a task that takes no GPU.
func (p *pools) slackAfter(n *Node, t Task) float64 {
	if t.GPUCount == 0 || len(n.GPUs) == 0 {
		return math.Inf(1)
	}
	m := n.GPUs[0].Model
	r := p.rate[m]
	if r == 0 {
		return math.Inf(1)
	}
	return float64(p.free[m]-t.Demand()) / r
}
