// Package placement decides where a GPU task goes in a cluster: which node,
// and which GPUs on it. Policies share one interface so that the planner, the
// device plugin and the trace simulator can swap them.
//
// Units: CPU in milli-cores, memory in MiB, GPU in milli-GPU per GPU
// (1000 = one whole GPU). A task asks either for a share of one GPU
// (GPUCount 1, GPUMilli below 1000), for GPUCount whole GPUs (GPUMilli
// 1000), or for no GPU at all (GPUCount 0).
package placement

// GPU is the state of one physical GPU.
type GPU struct {
	Model     string
	MemoryMiB int64
	// FreeMilli is the unallocated part of the GPU, 0 to 1000.
	FreeMilli int
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
	// GPUMilli is the ask per GPU: below 1000 for a share (GPUCount 1),
	// 1000 for whole GPUs.
	GPUMilli int
	// Models, when not empty, restricts the GPU models the task may use.
	Models []string
}

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
	Place(c *Cluster, t Task) (Choice, bool)
}
