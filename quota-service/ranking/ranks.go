package ranking

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
	nomadapi "github.com/hashicorp/nomad/api"
)

// Prefix starts every metadata key the ranking publishes.
const Prefix = placement.MetaPrefix

// Ranks is what to publish: node ID to metadata key to value ("0" or
// "1"). Keys holds every key published, sorted; a node in Nodes carries a
// value for each.
type Ranks struct {
	Keys  []string
	Nodes map[string]map[string]string
}

// Compute ranks every available node of snap for every class of work: the
// GPU work in the snapshot (running allocations and waiting work) and the
// CPU-only work of specs (CPUTasks). A node's value for a class is the
// level that placement.Ranking, with its default threshold, gives the
// class's typical task there. Unavailable nodes get no values (Nomad
// places nothing there).
func Compute(snap *cluster.Snapshot, specs map[string]*nomadapi.Job) (Ranks, error) {
	return computeWith(snap, CPUTasks(specs))
}

// computeWith is Compute with the CPU-only work given as tasks.
func computeWith(snap *cluster.Snapshot, cpu []placement.Task) (Ranks, error) {
	x, err := snap.Index()
	if err != nil {
		return Ranks{}, fmt.Errorf("ranking: indexing the snapshot: %w", err)
	}
	w := placement.NewWorkload(append(placement.SnapshotTasks(snap), cpu...), placement.DefaultCoverage)
	r := placement.NewRanking(w)
	out := Ranks{Nodes: map[string]map[string]string{}}
	probes := map[string]placement.Task{}
	for _, c := range w.Classes {
		t := placement.Task{CPUMilli: c.CPUMilli, MemoryMiB: c.MemoryMiB, GPUCount: c.GPUCount, Shares: c.Shares}
		key := Prefix + placement.ClassKey(t)
		probes[key] = t
		out.Keys = append(out.Keys, key)
	}
	sort.Strings(out.Keys)
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if n.Unavailable != "" {
			continue
		}
		node := placementNode(n, i, x)
		vals := make(map[string]string, len(out.Keys))
		for _, key := range out.Keys {
			vals[key] = fmt.Sprint(r.Level(&node, probes[key]))
		}
		out.Nodes[n.Name] = vals
	}
	return out, nil
}

// CPUTasks is the CPU-only work of specs (the snapshot holds GPU work
// only): one task per instance of each group that asks for no gpushare
// GPU, of every job that is not stopped, not dead, and not a system or
// sysbatch job (those run on every node wherever the ranks point).
func CPUTasks(specs map[string]*nomadapi.Job) []placement.Task {
	var out []placement.Task
	for _, job := range specs {
		out = append(out, jobCPUTasks(job)...)
	}
	return out
}

// jobCPUTasks is one job's part of CPUTasks.
func jobCPUTasks(job *nomadapi.Job) []placement.Task {
	if job == nil || job.Stop != nil && *job.Stop || job.Status != nil && *job.Status == "dead" ||
		job.Type != nil && (*job.Type == "system" || *job.Type == "sysbatch") {
		return nil
	}
	var out []placement.Task
	for _, tg := range job.TaskGroups {
		ask, gpu, err := nomadwatch.GroupAsk(tg, 1)
		if err != nil || gpu || tg.Count == nil {
			continue
		}
		for range *tg.Count {
			out = append(out, placement.TaskOf(ask))
		}
	}
	return out
}

// rankInputs are what a computation of the ranks read: the snapshot and
// the CPU-only work, sorted (compareTasks), with each spec's part by spec
// (a View's specs are read only, so a spec seen again adds the same).
type rankInputs struct {
	snap   *cluster.Snapshot
	cpu    []placement.Task
	ofSpec map[*nomadapi.Job][]placement.Task
	ranks  Ranks
}

// cpuTasksOf is CPUTasks(specs), sorted, each spec's part taken from
// last where it read the same spec.
func cpuTasksOf(specs map[string]*nomadapi.Job, last map[*nomadapi.Job][]placement.Task) ([]placement.Task, map[*nomadapi.Job][]placement.Task) {
	ofSpec := make(map[*nomadapi.Job][]placement.Task, len(specs))
	var out []placement.Task
	for _, job := range specs {
		tasks, ok := last[job]
		if !ok {
			tasks = jobCPUTasks(job)
		}
		ofSpec[job] = tasks
		out = append(out, tasks...)
	}
	slices.SortFunc(out, compareTasks)
	return out, ofSpec
}

// compareTasks orders tasks by their fields.
func compareTasks(a, b placement.Task) int {
	return cmp.Or(cmp.Compare(a.CPUMilli, b.CPUMilli), cmp.Compare(a.MemoryMiB, b.MemoryMiB), cmp.Compare(a.GPUCount, b.GPUCount),
		cmp.Compare(a.Shares, b.Shares), slices.Compare(a.Models, b.Models))
}

// rank is the ranks of snap and specs: last's when snap equals the
// snapshot last ranked and specs ask for the same CPU-only work (the ranks
// are a function of the two), else computed (computeWith). It returns
// what it read, for the next call.
func rank(snap *cluster.Snapshot, specs map[string]*nomadapi.Job, last *rankInputs) (*rankInputs, error) {
	var prev map[*nomadapi.Job][]placement.Task
	if last != nil {
		prev = last.ofSpec
	}
	in := &rankInputs{snap: snap}
	in.cpu, in.ofSpec = cpuTasksOf(specs, prev)
	if last != nil && last.snap.Equal(snap) && slices.EqualFunc(last.cpu, in.cpu, func(a, b placement.Task) bool { return compareTasks(a, b) == 0 }) {
		in.ranks = last.ranks
		return in, nil
	}
	var err error
	if in.ranks, err = computeWith(snap, in.cpu); err != nil {
		return nil, err
	}
	return in, nil
}

// placementNode is node i of the snapshot with what is free on it.
func placementNode(n *cluster.Node, i int, x *cluster.Index) placement.Node {
	gpus := make([]placement.GPU, len(n.GPUs))
	for g := range n.GPUs {
		gpus[g] = placement.GPU{Model: n.GPUs[g].Model, MemoryMiB: n.GPUs[g].MemoryMiB, Free: x.Free(i, g)}
	}
	return placement.Node{Name: n.Name, CPUMilli: n.CPUMilli, FreeCPUMilli: x.FreeCPUMilli[i],
		MemoryMiB: n.MemoryMiB, FreeMemoryMiB: x.FreeMemoryMiB[i], GPUs: gpus}
}
