package plan

import (
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// perGPU is what an ask takes on each GPU it is bound to.
func perGPU(a *cluster.Ask) cluster.Shares {
	if a.WholeGPUs > 0 {
		return cluster.SharesPerGPU
	}
	return a.Shares
}

// clusterState is the cluster being placed on: its free capacity as the
// plan so far leaves it, in package placement's terms, and what makes the
// search for idle room fast.
type clusterState struct {
	placement.Cluster
	// policy chooses nodes and GPUs on idle capacity; nil is first fit.
	policy placement.Policy
	// summaries speed up first fit, one per node; tally counts them.
	summaries []nodeSummary
	tally     nodeTally
	// releases counts the times capacity was given back; failed records,
	// per task shape, the count when it last failed to fit on idle
	// capacity (see placeIdle).
	releases int
	failed   map[shapeKey]int
	// bound is the number of candidate nodes the policy scores for one
	// placement (0: every node; see candidateBound); pools and
	// admittedBy (per node table, -1 until counted) serve the bounded
	// search (placeCandidates).
	bound      int
	pools      poolTally
	admittedBy []int
	// sub and subNodes are the scratch space of placeAmong and
	// placeCandidates.
	sub      placement.Cluster
	subNodes []int
}

// newClusterState turns the snapshot's nodes and free capacity into a
// placement cluster. An unavailable node shows no room at all (free CPU
// and memory -1, below any ask, and no free GPU), so that neither a policy
// nor first fit puts anything there.
func newClusterState(snap *cluster.Snapshot, x *cluster.Index, opts Options) clusterState {
	c := clusterState{
		policy: opts.Policy,
		bound:  candidateBound(opts.PlacementCandidates, opts.Policy),
		failed: map[shapeKey]int{},
	}
	c.Nodes = make([]placement.Node, len(snap.Nodes))
	for n := range snap.Nodes {
		node := &snap.Nodes[n]
		gpus := make([]placement.GPU, len(node.GPUs))
		for g := range node.GPUs {
			gpu := &node.GPUs[g]
			gpus[g] = placement.GPU{Model: gpu.Model, Mode: gpu.Mode, MemoryMiB: gpu.MemoryMiB, Free: x.Free(n, g)}
		}
		c.Nodes[n] = placement.Node{
			Name:          node.Name,
			CPUMilli:      node.CPUMilli,
			FreeCPUMilli:  x.FreeCPUMilli[n],
			MemoryMiB:     node.MemoryMiB,
			FreeMemoryMiB: x.FreeMemoryMiB[n],
			GPUs:          gpus,
		}
		if node.Unavailable != "" {
			c.Nodes[n].FreeCPUMilli, c.Nodes[n].FreeMemoryMiB = -1, -1
		}
	}
	return c
}

// task converts an ask to a placement task, with the models it may use
// (a GPU's mode admits it or not by the task's kind: placement.Task.MayUse).
func (c *clusterState) task(a cluster.Ask) placement.Task {
	t := placement.TaskOf(a)
	if t.GPUCount > 0 {
		t.Models = a.Models
	}
	return t
}
