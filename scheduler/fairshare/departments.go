package fairshare

import "github.com/gpushare/nomad-gpushare/scheduler/cluster"

// DeservedNested returns the deserved share of every project when projects
// belong to departments (docs/design.md, Departments): departments and the
// projects on their own first share the capacity by the rule of Deserved,
// a department standing for its projects; then each department's deserved
// share is split over its projects by the same rule. departmentOf[i] is
// the position of project i's department in departments, or -1.
//
// A department's demand is what its projects could be given: each one's
// demand capped by its limit, and only up to its guarantee for a project
// with over-quota weight 0 (it takes no part of the surplus, so what its
// department would win for it would be lost). So a department's deserved
// share is handed out whole to its projects, and surplus flows first
// within a department (its guarantee covers its projects before any other
// department's), then across departments by their weights.
func DeservedNested(capacity cluster.Shares, projects, departments []cluster.Project, departmentOf []int32, demand []cluster.Shares) []cluster.Shares {
	if len(departments) == 0 {
		return Deserved(capacity, projects, demand)
	}
	top := make([]cluster.Project, 0, len(departments)+len(projects))
	top = append(top, departments...)
	for i := range top {
		top[i].SurplusFactor = 0
	}
	topDemand := make([]cluster.Shares, len(departments), cap(top))
	members := make([][]int, len(departments))
	for i := range projects {
		d := departmentOf[i]
		if d < 0 {
			top = append(top, projects[i])
			topDemand = append(topDemand, demand[i])
			continue
		}
		members[d] = append(members[d], i)
		topDemand[d] += claimable(projects[i], demand[i])
	}
	topDeserved := Deserved(capacity, top, topDemand)
	deserved := make([]cluster.Shares, len(projects))
	alone := len(departments)
	for i := range projects {
		if departmentOf[i] < 0 {
			deserved[i] = topDeserved[alone]
			alone++
		}
	}
	for d, ids := range members {
		if len(ids) == 0 {
			continue
		}
		sub := make([]cluster.Project, len(ids))
		subDemand := make([]cluster.Shares, len(ids))
		for k, i := range ids {
			sub[k], subDemand[k] = projects[i], demand[i]
		}
		for k, v := range Deserved(topDeserved[d], sub, subDemand) {
			deserved[ids[k]] = v
		}
	}
	return deserved
}

// claimable is what a project could be given at most: its demand capped by
// its limit, and by its guarantee when it takes no part of the surplus.
func claimable(p cluster.Project, demand cluster.Shares) cluster.Shares {
	c := max(0, min(demand, p.Cap()))
	if p.Weight() == 0 {
		c = min(c, max(p.Guaranteed, 0))
	}
	return c
}
