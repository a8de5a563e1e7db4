package placement

import (
	"slices"
	"sort"
	"strings"
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
	GPUCount int
	GPUMilli int
	Models   []string
	Weight   float64
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
	type key struct {
		cpu    int64
		count  int
		milli  int
		models string
	}
	counts := map[key]int{}
	models := map[string][]string{}
	for _, t := range tasks {
		m := slices.Clone(t.Models)
		slices.Sort(m)
		ms := strings.Join(m, "|")
		models[ms] = m
		counts[key{t.CPUMilli, t.GPUCount, t.GPUMilli, ms}]++
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
		if a.milli != b.milli {
			return a.milli < b.milli
		}
		if a.cpu != b.cpu {
			return a.cpu < b.cpu
		}
		return a.models < b.models
	})
	w := &Workload{}
	need := coverage * float64(len(tasks))
	kept := 0
	for _, k := range keys {
		if len(w.Types) > 0 && float64(kept) >= need {
			break
		}
		kept += counts[k]
		w.Types = append(w.Types, TaskType{
			CPUMilli: k.cpu, GPUCount: k.count, GPUMilli: k.milli,
			Models: models[k.models], Weight: float64(counts[k]),
		})
	}
	for i := range w.Types {
		w.Types[i].Weight /= float64(kept)
	}
	return w
}

func (tt *TaskType) modelAllowed(model string) bool {
	return len(tt.Models) == 0 || slices.Contains(tt.Models, model)
}
