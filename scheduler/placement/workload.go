package placement

import (
	"cmp"
	"slices"
	"sort"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
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
	Shares    cluster.Shares
	Models    []string
	Weight    float64
}

// Workload is the expected task mix: the common task types and their
// weights. Fragmentation-aware policies measure a node's fragmentation
// against it.
type Workload struct {
	Types []TaskType
	// Classes has one entry per class of all the tasks (ClassOf: the GPU
	// ask and a power-of-two bound on the CPU ask), with the mean CPU and
	// memory of its tasks and its share of the tasks as Weight, most common
	// first. The ranking mechanism publishes a level per class (Ranking).
	Classes []TaskType
	// Multi has one entry per multi-GPU task type (the same key as Types:
	// CPU, GPU ask and models) of all the tasks, however rare, with its
	// share of all the tasks as Weight.
	Multi []TaskType
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
	all := histogram(tasks, weight, func(t Task) typeKey { return keyOf(t) })
	classes := histogram(tasks, func(Task) float64 { return 1 }, func(t Task) typeKey {
		return typeKey{count: t.GPUCount, shares: t.Shares, cpu: cpuBound(t.CPUMilli)}
	})
	var total float64
	for _, t := range tasks {
		total += weight(t)
	}
	var multi []TaskType
	for _, t := range all {
		if t.GPUCount > 1 {
			t.Weight /= total
			multi = append(multi, t)
		}
	}
	return &Workload{Types: mostCommon(all, coverage), Classes: mostCommon(classes, 1), Multi: multi}
}

// typeKey identifies a task type; models are joined in sorted order.
type typeKey struct {
	cpu    int64
	count  int
	shares cluster.Shares
	models string
}

func keyOf(t Task) typeKey {
	m := slices.Clone(t.Models)
	slices.Sort(m)
	return typeKey{cpu: t.CPUMilli, count: t.GPUCount, shares: t.Shares, models: strings.Join(m, "|")}
}

// histogram sums the weight of the tasks of each key, with their
// weighted mean CPU and memory, sorted most weight first (ties by key).
// Tasks of weight 0 are left out.
func histogram(tasks []Task, weight func(Task) float64, key func(Task) typeKey) []TaskType {
	type sums struct {
		weight, cpu, mem float64
		models           []string
	}
	byKey := map[typeKey]*sums{}
	var keys []typeKey
	for _, t := range tasks {
		wt := weight(t)
		if wt <= 0 {
			continue
		}
		k := key(t)
		s := byKey[k]
		if s == nil {
			s = &sums{}
			if k.models != "" {
				s.models = strings.Split(k.models, "|")
			}
			byKey[k] = s
			keys = append(keys, k)
		}
		s.weight += wt
		s.cpu += wt * float64(t.CPUMilli)
		s.mem += wt * float64(t.MemoryMiB)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if wa, wb := byKey[a].weight, byKey[b].weight; wa != wb {
			return wa > wb
		}
		return cmp.Or(cmp.Compare(a.count, b.count), cmp.Compare(a.shares, b.shares),
			cmp.Compare(a.cpu, b.cpu), cmp.Compare(a.models, b.models)) < 0
	})
	out := make([]TaskType, len(keys))
	for i, k := range keys {
		s := byKey[k]
		out[i] = TaskType{
			CPUMilli: int64(s.cpu / s.weight), MemoryMiB: int64(s.mem / s.weight),
			GPUCount: k.count, Shares: k.shares, Models: s.models, Weight: s.weight,
		}
	}
	return out
}

// mostCommon keeps the first types of a sorted histogram until they cover
// coverage of its total weight, and renormalizes their weights to sum to 1.
func mostCommon(types []TaskType, coverage float64) []TaskType {
	var total float64
	for _, t := range types {
		total += t.Weight
	}
	var kept []TaskType
	var sum float64
	for _, t := range types {
		if len(kept) > 0 && sum >= coverage*total {
			break
		}
		kept = append(kept, t)
		sum += t.Weight
	}
	for i := range kept {
		kept[i].Weight /= sum
	}
	return kept
}

// modelAllowed reports whether tasks of type tt may use GPUs of model m.
// A type weighs no GPU mode: the expected mix is of shapes and models, and
// the measures count the GPUs of every mode.
func (tt *TaskType) modelAllowed(m string) bool {
	return len(tt.Models) == 0 || slices.Contains(tt.Models, m)
}
