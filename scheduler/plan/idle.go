package plan

import (
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// nodeSummary is what the first-fit search reads to skip a node quickly.
type nodeSummary struct {
	maxFree int // the largest free amount of one GPU
	idle    int // fully free GPUs
}

func (c *clusterState) initSummaries() {
	c.summaries = make([]nodeSummary, len(c.Nodes))
	for n := range c.Nodes {
		c.summarize(n)
	}
}

// summarize refreshes node n's summary after its free capacity changed.
func (c *clusterState) summarize(n int) {
	if c.summaries == nil {
		return
	}
	var sum nodeSummary
	for _, g := range c.Nodes[n].GPUs {
		sum.maxFree = max(sum.maxFree, g.FreeMilli)
		if g.FreeMilli >= placementGPU(model.SharesPerGPU) {
			sum.idle++
		}
	}
	c.summaries[n] = sum
}

// shapeKey is what placeIdle remembers a failed task by.
type shapeKey struct {
	cpu, mem int64
	count    int
	milli    int
	models   string
}

func shapeOf(t placement.Task) shapeKey {
	return shapeKey{cpu: t.CPUMilli, mem: t.MemoryMiB, count: t.GPUCount, milli: t.GPUMilli, models: strings.Join(t.Models, "\x00")}
}

// placeIdle finds room for t on free capacity, with the policy or by first
// fit. A shape that failed is not searched again until capacity is given
// back.
func (c *clusterState) placeIdle(t placement.Task) (placement.Choice, bool) {
	key := shapeOf(t)
	if at, ok := c.failed[key]; ok && at == c.releases {
		return placement.Choice{}, false
	}
	var ch placement.Choice
	var ok bool
	if c.policy != nil {
		ch, ok = c.policy.Place(&c.Cluster, t)
	} else {
		ch, ok = c.firstFit(t)
	}
	if !ok {
		c.failed[key] = c.releases
	}
	return ch, ok
}

func (c *clusterState) firstFit(t placement.Task) (placement.Choice, bool) {
	for n := range c.Nodes {
		node := &c.Nodes[n]
		if node.FreeCPUMilli < t.CPUMilli || node.FreeMemoryMiB < t.MemoryMiB {
			continue
		}
		sum := c.summaries[n]
		if t.GPUCount > 0 && (sum.maxFree < t.GPUMilli || (t.GPUMilli >= placementGPU(model.SharesPerGPU) && sum.idle < t.GPUCount)) {
			continue
		}
		if gpus, ok := c.Fits(n, t); ok {
			return placement.Choice{Node: n, GPUs: gpus}, true
		}
	}
	return placement.Choice{}, false
}
