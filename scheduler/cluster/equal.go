package cluster

import "slices"

// Equal reports whether s and o are the same state to plan on: the same
// nodes, allocations, pending workloads, projects and departments, field
// by field and in the same order. A plan is deterministic for its
// snapshot and policy (package plan), so a plan of one is a plan of the
// other.
func (s *Snapshot) Equal(o *Snapshot) bool {
	return slices.EqualFunc(s.Nodes, o.Nodes, equalNodes) &&
		slices.EqualFunc(s.Allocations, o.Allocations, equalAllocations) &&
		slices.EqualFunc(s.Pending, o.Pending, equalPending) &&
		slices.Equal(s.Projects, o.Projects) && slices.Equal(s.Departments, o.Departments)
}

func equalNodes(a, b Node) bool {
	return a.Name == b.Name && a.CPUMilli == b.CPUMilli && a.MemoryMiB == b.MemoryMiB &&
		a.Unavailable == b.Unavailable && sameList(a.GPUs, b.GPUs)
}

func equalAllocations(a, b Allocation) bool {
	return a.ID == b.ID && a.Project == b.Project && a.Job == b.Job && a.Group == b.Group &&
		a.Priority == b.Priority && a.Preemptible == b.Preemptible && a.System == b.System &&
		a.NeverVictim == b.NeverVictim && equalAsks(a.Ask, b.Ask) && a.Node == b.Node &&
		sameList(a.GPUs, b.GPUs) && a.Start == b.Start && a.Gang == b.Gang && a.MinCount == b.MinCount &&
		a.InMinRuntime == b.InMinRuntime && a.Movable == b.Movable && a.Instance == b.Instance
}

func equalPending(a, b Pending) bool {
	return a.Project == b.Project && a.Job == b.Job && a.Group == b.Group && a.Priority == b.Priority &&
		a.Preemptible == b.Preemptible && equalAsks(a.Ask, b.Ask) && a.Count == b.Count &&
		a.Submit == b.Submit && a.Suspended == b.Suspended && sameList(a.Nodes, b.Nodes) &&
		a.NodesReason == b.NodesReason && a.Gang == b.Gang && a.MinCount == b.MinCount && a.Shrunk == b.Shrunk
}

func equalAsks(a, b Ask) bool {
	return a.CPUMilli == b.CPUMilli && a.MemoryMiB == b.MemoryMiB && a.WholeGPUs == b.WholeGPUs &&
		a.Shares == b.Shares && sameList(a.Models, b.Models)
}

// sameList compares two lists, nil apart from empty: a nil Pending.Nodes
// admits every node, an empty one none.
func sameList[T comparable](a, b []T) bool {
	return (a == nil) == (b == nil) && slices.Equal(a, b)
}
