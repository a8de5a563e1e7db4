package ranking

import (
	"fmt"
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
	x, err := snap.Index()
	if err != nil {
		return Ranks{}, fmt.Errorf("ranking: indexing the snapshot: %w", err)
	}
	w := placement.NewWorkload(append(placement.SnapshotTasks(snap), CPUTasks(specs)...), placement.DefaultCoverage)
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
		if job == nil || job.Stop != nil && *job.Stop || job.Status != nil && *job.Status == "dead" ||
			job.Type != nil && (*job.Type == "system" || *job.Type == "sysbatch") {
			continue
		}
		for _, tg := range job.TaskGroups {
			ask, gpu, err := nomadwatch.GroupAsk(tg, 1)
			if err != nil || gpu || tg.Count == nil {
				continue
			}
			for range *tg.Count {
				out = append(out, placement.TaskOf(ask))
			}
		}
	}
	return out
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
