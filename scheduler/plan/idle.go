package plan

import (
	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// nodeSummary is what the first-fit search reads to skip a node quickly.
type nodeSummary struct {
	maxFree model.Shares // the largest free capacity of one GPU
	idle    int          // fully free GPUs
}

func (s *state) initSummaries() {
	s.summaries = make([]nodeSummary, len(s.cluster.Nodes))
	for n := range s.cluster.Nodes {
		s.summarize(n)
	}
}

func (s *state) summarize(n int) {
	if s.summaries == nil {
		return
	}
	var sum nodeSummary
	for _, g := range s.cluster.Nodes[n].GPUs {
		sum.maxFree = max(sum.maxFree, g.Free)
		if g.Free >= model.SharesPerGPU {
			sum.idle++
		}
	}
	s.summaries[n] = sum
}

// placeIdle finds room for t on free capacity, with the policy or by first
// fit. A shape that failed is not searched again until capacity is given
// back.
func (s *state) placeIdle(t placement.Task) (placement.Choice, bool) {
	key := shapeOf(t)
	if at, ok := s.failed[key]; ok && at == s.releases {
		return placement.Choice{}, false
	}
	var ch placement.Choice
	var ok bool
	if s.policy != nil {
		ch, ok = s.policy.Place(&s.cluster, t)
	} else {
		ch, ok = s.firstFit(t)
	}
	if !ok {
		s.failed[key] = s.releases
	}
	return ch, ok
}

func (s *state) firstFit(t placement.Task) (placement.Choice, bool) {
	for n := range s.cluster.Nodes {
		node := &s.cluster.Nodes[n]
		if node.FreeCPUMilli < t.CPUMilli || node.FreeMemoryMiB < t.MemoryMiB {
			continue
		}
		sum := s.summaries[n]
		if t.GPUCount > 0 && (sum.maxFree < t.Shares || (t.Shares >= model.SharesPerGPU && sum.idle < t.GPUCount)) {
			continue
		}
		if gpus, ok := s.cluster.Fits(n, t); ok {
			return placement.Choice{Node: n, GPUs: gpus}, true
		}
	}
	return placement.Choice{}, false
}
