// Package placement decides where a GPU task goes in a cluster: which node,
// and which GPUs on it. Policies share one interface, so that the quota
// service's planner (scheduler/plan, which takes a policy by name) and the
// trace simulator (scheduler/sim) run the same code. The device plugin does
// not use this package: inside a node it publishes GPUs for Nomad to choose
// from (device/partition), and the "deployed" policy models that choice.
//
// Units: CPU in milli-cores, memory in MiB, GPU in cluster.Shares (0.01 GPU;
// cluster.SharesPerGPU is one whole GPU), the project's one unit of GPU. A
// task asks either for a share of one GPU (GPUCount 1, Shares below
// cluster.SharesPerGPU), for GPUCount whole GPUs (Shares cluster.SharesPerGPU),
// or for no GPU at all (GPUCount 0).
package placement

import "github.com/gpushare/nomad-gpushare/scheduler/cluster"

// GPU is the state of one physical GPU.
type GPU struct {
	Model string
	// Mode says which tasks the GPU may take (Task.MayUse): cluster.ModeAny
	// any, cluster.ModeWhole only whole GPUs, cluster.ModeShared only shares,
	// cluster.ModeMIG none (Nomad places on MIG devices by itself).
	Mode      cluster.Mode
	MemoryMiB int64
	// Free is the unallocated part of the GPU, 0 to cluster.SharesPerGPU.
	Free cluster.Shares
}

// Node is the state of one node: its capacity and what is still free.
type Node struct {
	Name          string
	CPUMilli      int64
	FreeCPUMilli  int64
	MemoryMiB     int64
	FreeMemoryMiB int64
	GPUs          []GPU
}

// Task is what one placement asks for.
type Task struct {
	CPUMilli  int64
	MemoryMiB int64
	// GPUCount is the number of GPUs: 0 for a CPU-only task, 1 for a
	// share, N for N whole GPUs.
	GPUCount int
	// Shares is the ask on each GPU: below cluster.SharesPerGPU for a share
	// (GPUCount 1), cluster.SharesPerGPU for whole GPUs.
	Shares cluster.Shares
	// Models, when not empty, restricts the GPU models the task may use.
	Models []string
}

// Demand is the GPU capacity t takes in all: GPUCount times Shares.
func (t Task) Demand() cluster.Shares { return cluster.Shares(t.GPUCount) * t.Shares }

// Choice is a placement: the index of the node in Cluster.Nodes and the
// indexes of the GPUs on that node the task is bound to.
type Choice struct {
	Node int
	GPUs []int
}

// Policy picks a node and GPUs for a task, or reports that none fits.
// A policy never changes the cluster; the caller applies the choice with
// Cluster.Assign.
type Policy interface {
	// Name is the policy's short name as used on command lines
	// ("random", "bestfit", ...).
	Name() string
	// SamplesNodes reports whether the policy itself chooses among a
	// random sample of the feasible nodes, as Nomad does. A caller that
	// bounds the search (scores only some candidate nodes, in cluster
	// order) shows such a policy every node instead: candidates taken in
	// cluster order would bias its sample toward the first nodes.
	SamplesNodes() bool
	// Place chooses a node of c.Nodes and GPUs on it for t. When
	// c.Pools is set, c.Nodes are candidates drawn from a larger cluster
	// and what the policy weighs over the whole cluster (the GPU pools)
	// comes from c.Pools.
	Place(c *Cluster, t Task) (Choice, bool)
}

// TaskOf is the placement task of one instance of ask, without its model
// restrictions: whole GPUs take all of each GPU's shares, a fraction its
// shares of one GPU.
func TaskOf(a cluster.Ask) Task {
	t := Task{CPUMilli: a.CPUMilli, MemoryMiB: a.MemoryMiB}
	switch {
	case a.WholeGPUs > 0:
		t.GPUCount, t.Shares = a.WholeGPUs, cluster.SharesPerGPU
	case a.Shares > 0:
		t.GPUCount, t.Shares = 1, a.Shares
	}
	return t
}

// SnapshotTasks is snap's work as placement tasks (TaskOf): one per
// allocation and one per waiting instance, the workload that policies
// built from a task mix (NewWorkload) learn from.
func SnapshotTasks(snap *cluster.Snapshot) []Task {
	out := make([]Task, 0, len(snap.Allocations)+len(snap.Pending))
	for _, a := range snap.Allocations {
		out = append(out, TaskOf(a.Ask))
	}
	for _, w := range snap.Pending {
		t := TaskOf(w.Ask)
		for range w.Count {
			out = append(out, t)
		}
	}
	return out
}
