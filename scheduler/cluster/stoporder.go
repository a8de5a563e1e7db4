package cluster

import "cmp"

// GroupMember is one instance of a task group as Nomad picks the
// instances to stop when the group's count falls: by its index in the
// group (Allocation.Instance), when it started, and its allocation ID.
type GroupMember struct {
	ID       string
	Instance int
	Start    int64
}

// MemberOf is allocation a as a member of its task group.
func MemberOf(a *Allocation) GroupMember {
	return GroupMember{ID: a.ID, Instance: a.Instance, Start: a.Start}
}

// CompareStopOrder orders two instances of one task group as Nomad stops
// them when the group's count falls: the highest index first, then the
// latest start, then the highest allocation ID (docs/design.md, Gangs and
// elastic groups). It is negative when x is stopped before y. The
// planner's shrink units, the actuator's check of a shrink and the view's
// instances above a group's count all follow it.
func CompareStopOrder(x, y GroupMember) int {
	return cmp.Or(cmp.Compare(y.Instance, x.Instance), cmp.Compare(y.Start, x.Start), cmp.Compare(y.ID, x.ID))
}
