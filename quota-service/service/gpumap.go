package service

import (
	"sort"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
)

// NodeView is one GPU node as the dashboard's map draws it: each GPU's
// family, what is held on it and by whom.
type NodeView struct {
	Node string `json:"node"`
	// Unavailable says why the node is out of planning ("" when in).
	Unavailable string    `json:"unavailable,omitempty"`
	GPUs        []GPUView `json:"gpus"`
}

// GPUView is one GPU (or MIG device) of a node.
type GPUView struct {
	Index int    `json:"index"`
	Model string `json:"model"`
	// Family is "whole", "shared" or "mig" as published, or as its
	// tenants hold it; "idle" for an idle GPU either family may take.
	Family string `json:"family"`
	// Unavailable says why the GPU takes no work ("" when healthy).
	Unavailable string `json:"unavailable,omitempty"`
	// Capacity and Held are in shares (100 a GPU).
	Capacity int      `json:"capacity"`
	Held     int      `json:"held"`
	Tenants  []Tenant `json:"tenants,omitempty"`
}

// Tenant is a job's hold on one GPU.
type Tenant struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Project   string `json:"project"`
	Shares    int    `json:"shares"`
}

// gpuMap lays out the snapshot's GPU nodes, sorted by name, each GPU's
// tenants by job.
func gpuMap(snap *model.Snapshot) []NodeView {
	byNode := map[string]*NodeView{}
	var out []NodeView
	for _, n := range snap.Nodes {
		if len(n.GPUs) == 0 {
			continue
		}
		v := NodeView{Node: n.Name, Unavailable: n.Unavailable}
		for i, g := range n.GPUs {
			v.GPUs = append(v.GPUs, GPUView{Index: i, Model: g.Model, Family: g.Mode.String(), Unavailable: g.Unavailable, Capacity: int(g.Capacity())})
		}
		out = append(out, v)
	}
	for i := range out {
		byNode[out[i].Node] = &out[i]
	}
	for _, a := range snap.Allocations {
		n := byNode[a.Node]
		if n == nil {
			continue
		}
		for _, gi := range a.GPUs {
			if gi < 0 || gi >= len(n.GPUs) {
				continue
			}
			g := &n.GPUs[gi]
			shares := g.Capacity
			if a.Ask.WholeGPUs == 0 && a.Ask.Shares > 0 {
				shares = int(a.Ask.Shares)
			}
			ns, job, _ := strings.Cut(a.Job, "/")
			g.Held += shares
			g.Tenants = append(g.Tenants, Tenant{Namespace: ns, Job: job, Project: a.Project, Shares: shares})
		}
	}
	for _, n := range out {
		for i := range n.GPUs {
			g := &n.GPUs[i]
			if g.Family == model.ModeAny.String() {
				g.Family = heldAs(g.Tenants, g.Capacity)
			}
			sort.Slice(g.Tenants, func(i, j int) bool {
				return g.Tenants[i].Namespace+"/"+g.Tenants[i].Job < g.Tenants[j].Namespace+"/"+g.Tenants[j].Job
			})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// heldAs is the family a GPU's tenants hold it in: "whole" for a tenant
// holding all of it, "shared" for tenants holding shares, "idle" for none.
func heldAs(tenants []Tenant, capacity int) string {
	switch {
	case len(tenants) == 0:
		return "idle"
	case len(tenants) == 1 && tenants[0].Shares >= capacity:
		return "whole"
	}
	return "shared"
}
