package placement

import (
	"slices"
	"sort"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
)

// DefaultCoverage is the share of tasks whose types a Workload keeps: the
// most common types that together cover 95% of the tasks, as in the FGD
// paper.
const DefaultCoverage = 0.95

// TaskType is one kind of task in a workload and its weight (its share of
// the tasks, the weights of a Workload sum to 1). Memory is not part of a
// type: it is a hard limit, but it does not shape fragmentation.
type TaskType struct {
	CPUMilli int64
	// MemoryMiB is the mean memory ask of the type's tasks.
	MemoryMiB int64
	GPUCount  int
	Shares    model.Shares
	Models    []string
	Weight    float64
}

// Workload is the expected task mix: the common task types and their
// weights. Fragmentation-aware policies measure a node's fragmentation
// against it.
type Workload struct {
	Types []TaskType
}

// NewWorkload builds the histogram of task types of tasks and keeps the most
// common types that together cover at least coverage (0 to 1) of the tasks;
// the kept weights are renormalized to sum to 1. Ties in count are ordered by
// the type's fields so that the result does not depend on map order.
func NewWorkload(tasks []Task, coverage float64) *Workload {
	return NewWorkloadBy(tasks, coverage, func(Task) float64 { return 1 })
}

// ByGPUDemand weighs a task by its GPU demand (GPUCount*Shares), so that
// a Workload built with it gives each type its share of the GPU demand
// rather than of the task count. CPU-only tasks weigh nothing.
func ByGPUDemand(t Task) float64 { return float64(t.Demand()) }

// NewWorkloadBy is NewWorkload with each task weighing weight(t) instead
// of 1: types are ranked by total weight and kept until they cover coverage
// of the total weight. Tasks of weight 0 are left out.
func NewWorkloadBy(tasks []Task, coverage float64, weight func(Task) float64) *Workload {
	type key struct {
		cpu    int64
		count  int
		shares model.Shares
		models string
	}
	counts := map[key]float64{}
	mems := map[key]float64{}
	var total float64
	models := map[string][]string{}
	for _, t := range tasks {
		m := slices.Clone(t.Models)
		slices.Sort(m)
		ms := strings.Join(m, "|")
		models[ms] = m
		wt := weight(t)
		if wt <= 0 {
			continue
		}
		counts[key{t.CPUMilli, t.GPUCount, t.Shares, ms}] += wt
		mems[key{t.CPUMilli, t.GPUCount, t.Shares, ms}] += wt * float64(t.MemoryMiB)
		total += wt
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if counts[a] != counts[b] {
			return counts[a] > counts[b]
		}
		if a.count != b.count {
			return a.count < b.count
		}
		if a.shares != b.shares {
			return a.shares < b.shares
		}
		if a.cpu != b.cpu {
			return a.cpu < b.cpu
		}
		return a.models < b.models
	})
	w := &Workload{}
	need := coverage * total
	var kept float64
	for _, k := range keys {
		if len(w.Types) > 0 && kept >= need {
			break
		}
		kept += counts[k]
		w.Types = append(w.Types, TaskType{
			CPUMilli: k.cpu, GPUCount: k.count, Shares: k.shares,
			Models: models[k.models], Weight: counts[k],
			MemoryMiB: int64(mems[k] / counts[k]),
		})
	}
	for i := range w.Types {
		w.Types[i].Weight /= kept
	}
	return w
}

func (tt *TaskType) modelAllowed(m string) bool {
	return len(tt.Models) == 0 || slices.Contains(tt.Models, m)
}
