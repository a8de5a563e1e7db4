package httpapi

import (
	"strings"

	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

// hiddenWorkload stands for a workload in a namespace the request may not
// see, where a reason names it.
const hiddenWorkload = "(a workload in a namespace your token cannot read)"

// hiddenError stands for the last cycle's error for a token that cannot
// see everything: the error may name any namespace's jobs.
const hiddenError = "hidden, as it may name jobs of any namespace: see the service's log, or /v1/status with a management token"

// visibleStatus is what a request with access a may see of st: the
// projects whose namespace it may read; the pending, suspended, waiting
// and recent jobs of namespaces it may read, with the workloads of others
// hidden in their reasons; the departments all of whose projects it may
// see, and of the others only the name and those projects
// (visibleDepartments); nodes out of planning and the GPU map only with
// node read (the map's jobs of other namespaces hidden); the
// warnings and the last error's text (which may name any job) only with
// access to everything.
func visibleStatus(st service.Status, a Access) service.Status {
	if a.All {
		return st
	}
	out := st
	out.Projects = visibleProjects(st.Projects, a)
	out.Departments = visibleDepartments(st.Departments, out.Projects)
	out.Pending = visibleLines(st.Pending, a)
	out.Unplaced = visibleLines(st.Unplaced, a)
	out.Unplaceable = visibleLines(st.Unplaceable, a)
	out.Suspended = nil
	for _, j := range st.Suspended {
		if a.Namespace(j.Namespace) {
			j.Reason, j.ForWorkload = hideWorkload(j.Reason, j.ForWorkload, a)
			out.Suspended = append(out.Suspended, j)
		}
	}
	out.Shrunk = nil
	for _, j := range st.Shrunk {
		if a.Namespace(j.Namespace) {
			j.Reason, j.ForWorkload = hideWorkload(j.Reason, j.ForWorkload, a)
			out.Shrunk = append(out.Shrunk, j)
		}
	}
	out.Gangs = nil
	for _, g := range st.Gangs {
		if a.Namespace(g.Namespace) {
			g.WaitsFor, g.For = hideWorkload(g.WaitsFor, g.For, a)
			out.Gangs = append(out.Gangs, g)
		}
	}
	out.Recent = nil
	for _, e := range st.Recent {
		if a.Namespace(e.Namespace) {
			out.Recent = append(out.Recent, visibleEntry(e, a))
		}
	}
	out.RecordErrors = nil
	for _, e := range st.RecordErrors {
		if a.Namespace(e.Namespace) {
			out.RecordErrors = append(out.RecordErrors, e)
		}
	}
	if !a.Nodes {
		out.OutOfPlanning = nil
	}
	out.Nodes = visibleNodes(st.Nodes, a)
	out.Trend = visibleTrend(st.Trend, out.Projects)
	out.Warnings = nil
	if out.LastError != "" {
		out.LastError = hiddenError
	}
	return out
}

// visibleNodes is the GPU map for a request that may not see everything:
// none without node read; else every GPU, with the jobs of namespaces it
// may not read hidden (their project and shares stay).
func visibleNodes(nodes []service.NodeView, a Access) []service.NodeView {
	if !a.Nodes {
		return nil
	}
	out := make([]service.NodeView, len(nodes))
	for i, n := range nodes {
		out[i] = n
		out[i].GPUs = make([]service.GPUView, len(n.GPUs))
		for j, g := range n.GPUs {
			out[i].GPUs[j] = g
			out[i].GPUs[j].Tenants = visibleTenants(g.Tenants, a)
			out[i].GPUs[j].Guests = visibleTenants(g.Guests, a)
		}
	}
	return out
}

// visibleTenants hides the jobs of namespaces the request may not read
// (their project, shares and memory stay).
func visibleTenants(tenants []service.Tenant, a Access) []service.Tenant {
	var out []service.Tenant
	for _, t := range tenants {
		if !a.Namespace(t.Namespace) {
			t.Namespace, t.Job = "", hiddenWorkload
		}
		out = append(out, t)
	}
	return out
}

// visibleTrend keeps, of each sample, the projects in visible.
func visibleTrend(trend []service.TrendPoint, visible []service.ProjectView) []service.TrendPoint {
	seen := map[string]bool{}
	for _, p := range visible {
		seen[p.Project] = true
	}
	out := make([]service.TrendPoint, 0, len(trend))
	for _, pt := range trend {
		keep := service.TrendPoint{At: pt.At, Projects: map[string]service.ProjectSample{}}
		for name, sample := range pt.Projects {
			if seen[name] {
				keep.Projects[name] = sample
			}
		}
		out = append(out, keep)
	}
	return out
}

// visibleUtilization keeps the lines of the projects a may see; which
// nodes did not answer, and processes of no tenant, only with node read.
func visibleUtilization(u service.Utilization, projects []service.ProjectView, a Access) service.Utilization {
	if a.All {
		return u
	}
	seen := map[string]bool{}
	for _, p := range visibleProjects(projects, a) {
		seen[p.Project] = true
	}
	out := u
	out.Projects = nil
	for _, p := range u.Projects {
		if seen[p.Project] {
			out.Projects = append(out.Projects, p)
		}
	}
	if !a.Nodes {
		out.Failed, out.Error = nil, ""
		out.OutsideProcesses, out.OutsideMiB = 0, 0
	}
	return out
}

// visibleProjects are the lines of the projects whose namespace a may
// read (a project without a namespace is named like it), with their
// non-preemptible and never-victim jobs of other namespaces left out.
func visibleProjects(projects []service.ProjectView, a Access) []service.ProjectView {
	var out []service.ProjectView
	for _, p := range projects {
		ns := p.Namespace
		if ns == "" {
			ns = p.Project
		}
		if !a.Namespace(ns) {
			continue
		}
		p.NonPreemptibleAboveGuarantee = visibleLines(p.NonPreemptibleAboveGuarantee, a)
		p.NeverVictims = visibleLines(p.NeverVictims, a)
		out = append(out, p)
	}
	return out
}

// visibleDepartments are the department lines for a request that sees
// the projects in visible. A department's totals and settings sum up its
// projects, so they are shown only to a request that may see all of its
// projects; to one that sees some of them the department is a name over
// those projects (Partial); one that sees none of them does not see it.
func visibleDepartments(departments []service.DepartmentView, visible []service.ProjectView) []service.DepartmentView {
	seen := map[string]bool{}
	for _, p := range visible {
		seen[p.Project] = true
	}
	var out []service.DepartmentView
	for _, d := range departments {
		var shown []string
		for _, p := range d.Projects {
			if seen[p] {
				shown = append(shown, p)
			}
		}
		switch {
		case len(shown) == len(d.Projects):
			out = append(out, d)
		case len(shown) > 0:
			out = append(out, service.DepartmentView{Name: d.Name, Projects: shown, Partial: true})
		}
	}
	return out
}

// visibleLines keeps the "namespace/job..." lines of namespaces a may
// read (Nomad namespaces never hold a slash).
func visibleLines(lines []string, a Access) []string {
	var out []string
	for _, l := range lines {
		if ns, _, ok := strings.Cut(l, "/"); ok && a.Namespace(ns) {
			out = append(out, l)
		}
	}
	return out
}

func visibleEntry(e state.Entry, a Access) state.Entry {
	e.Reason, e.ForWorkload = hideWorkload(e.Reason, e.ForWorkload, a)
	return e
}

// hideWorkload hides workload ("namespace/job/group") in reason, and
// returns it as "", when a may not read its namespace.
func hideWorkload(reason, workload string, a Access) (string, string) {
	ns, _, ok := strings.Cut(workload, "/")
	if !ok || a.Namespace(ns) {
		return reason, workload
	}
	return strings.ReplaceAll(reason, workload, hiddenWorkload), ""
}
