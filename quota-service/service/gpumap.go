package service

import (
	"sort"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
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
	Index int `json:"index"`
	// UUID is the GPU's NVIDIA UUID as the device plugin publishes it.
	UUID  string `json:"uuid,omitempty"`
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
	// Memory is what the node's device plugin last reported of the GPU
	// (nil when the service reads no usage or the node did not answer).
	Memory *GPUMemory `json:"memory,omitempty"`
	// Guests are tenants of other GPUs of the node that the node-level
	// scheduler runs here (docs/design.md, "Dynamic fractions"); for
	// Nomad this GPU stays free for a whole-GPU job.
	Guests []Tenant `json:"guests,omitempty"`
}

// GPUMemory is a GPU's memory as its device plugin reports it.
type GPUMemory struct {
	TotalMiB uint64 `json:"total_mib"`
	UsedMiB  uint64 `json:"used_mib"`
}

// Tenant is a job's hold on one GPU.
type Tenant struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Project   string `json:"project"`
	Shares    int    `json:"shares"`
	// Memory is the tenant's use of GPU memory against its request and
	// limit, from the device plugin's report (share tenants only; nil
	// when not reported).
	Memory *TenantMemory `json:"memory,omitempty"`
	// allocID matches the tenant with the plugin's report.
	allocID string
}

// TenantMemory is a share tenant's GPU memory (dynamic fractions): it may
// use up to its limit, and what it uses above its request is borrowed,
// given back when another tenant needs it.
type TenantMemory struct {
	UsedMiB     uint64 `json:"used_mib"`
	RequestMiB  uint64 `json:"request_mib"`
	LimitMiB    uint64 `json:"limit_mib"`
	BorrowedMiB uint64 `json:"borrowed_mib"`
	// GuestOn is the index of the GPU it runs on as a guest, away from
	// the GPU Nomad bound it to (nil when it runs there).
	GuestOn *int `json:"guest_on,omitempty"`
	// Home is, on a guest's line under its host GPU, the GPU Nomad bound
	// it to.
	Home *int `json:"home,omitempty"`
}

// gpuMap lays out the snapshot's GPU nodes, sorted by name, each GPU's
// tenants by job.
func gpuMap(snap *cluster.Snapshot) []NodeView {
	byNode := map[string]*NodeView{}
	var out []NodeView
	for _, n := range snap.Nodes {
		if len(n.GPUs) == 0 {
			continue
		}
		v := NodeView{Node: n.Name, Unavailable: n.Unavailable}
		for i, g := range n.GPUs {
			v.GPUs = append(v.GPUs, GPUView{Index: i, UUID: g.ID, Model: g.Model, Family: g.Mode.String(), Unavailable: g.Unavailable, Capacity: int(g.Capacity())})
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
			g.Tenants = append(g.Tenants, Tenant{Namespace: ns, Job: job, Project: a.Project, Shares: shares, allocID: a.ID})
		}
	}
	for _, n := range out {
		for i := range n.GPUs {
			g := &n.GPUs[i]
			if g.Family == cluster.ModeAny.String() {
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

// addMemory adds to the map what the device plugins last reported: each
// GPU's memory, each share tenant's use against its request and limit,
// and the guests the node-level scheduler runs away from their home GPU.
// Reports are matched by GPU UUID and allocation ID.
func addMemory(nodes []NodeView, reports []nodeusage.Report) {
	gpus := map[string]nodeusage.GPU{}
	tenants := map[string]nodeusage.Tenant{}
	for _, r := range reports {
		for _, g := range r.GPUs {
			gpus[g.UUID] = g
		}
		for _, t := range r.Tenants {
			if !t.Whole {
				tenants[t.AllocID] = t
			}
		}
	}
	for _, n := range nodes {
		index := map[string]int{}
		for i, g := range n.GPUs {
			index[g.UUID] = i
		}
		for i := range n.GPUs {
			g := &n.GPUs[i]
			if rg, ok := gpus[g.UUID]; ok && g.UUID != "" {
				g.Memory = &GPUMemory{TotalMiB: rg.TotalMiB, UsedMiB: rg.UsedMiB}
			}
			for k := range g.Tenants {
				addTenantMemory(n.GPUs, index, i, &g.Tenants[k], tenants)
			}
		}
	}
}

// addTenantMemory fills tenant's memory from its report line and, for a
// guest, lists it under its host GPU.
func addTenantMemory(gpus []GPUView, index map[string]int, home int, tenant *Tenant, reported map[string]nodeusage.Tenant) {
	rt, ok := reported[tenant.allocID]
	if !ok || tenant.allocID == "" {
		return
	}
	m := &TenantMemory{UsedMiB: rt.UsedMiB, RequestMiB: rt.RequestMiB, LimitMiB: rt.LimitMiB}
	if rt.UsedMiB > rt.RequestMiB {
		m.BorrowedMiB = rt.UsedMiB - rt.RequestMiB
	}
	tenant.Memory = m
	host, ok := index[rt.GPU]
	if !rt.Guest || !ok || host == home {
		return
	}
	m.GuestOn = &host
	guest := *tenant
	gm := *m
	gm.GuestOn, gm.Home = nil, &home
	guest.Memory = &gm
	gpus[host].Guests = append(gpus[host].Guests, guest)
}
