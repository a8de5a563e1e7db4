package cluster

import "slices"

// Equal reports whether s and o are the same state to plan on: the same
// nodes, allocations, pending workloads, projects and departments, field
// by field and in the same order. A plan is deterministic for its
// snapshot and policy (package plan), so a plan of one is a plan of the
// other.
func (s *Snapshot) Equal(o *Snapshot) bool {
	return s.EqualRunning(o) && equalLists(s.Pending, o.Pending, equalPending)
}

// EqualRunning reports whether s and o are the same running cluster: the
// same nodes, allocations, projects and departments, field by field and
// in the same order; their pending work may differ.
func (s *Snapshot) EqualRunning(o *Snapshot) bool {
	return equalLists(s.Nodes, o.Nodes, equalNodes) &&
		EqualAllocations(s.Allocations, o.Allocations) &&
		slices.Equal(s.Projects, o.Projects) && slices.Equal(s.Departments, o.Departments)
}

// EqualNode reports whether a and b are the same node to plan on, field
// by field.
func EqualNode(a, b Node) bool { return equalNodes(a, b) }

// EqualAllocations reports whether two lists hold the same allocations,
// field by field and in the same order.
func EqualAllocations(a, b []Allocation) bool { return equalLists(a, b, equalAllocations) }

// equalLists compares two lists element by element; two views of one
// backing array are equal without a look at their elements (a snapshot's
// lists are read only once built, so one View may share them with the
// next: nomadwatch).
func equalLists[T any](a, b []T, eq func(T, T) bool) bool {
	return SameList(a, b) || slices.EqualFunc(a, b, eq)
}

// SameList reports whether a and b are one list: the same length over
// the same backing array (or both empty).
func SameList[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
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
