// Package utilization reads, from the device plugin of every GPU node,
// what each tenant (a task holding gpushare devices) is guaranteed and
// really uses (package vocab/nodeusage), and sums it per project:
// allocated, used memory and compute, the idle part of the allocation and
// what is borrowed above it (docs/design.md, "Dynamic fractions and the
// node-level scheduler", Utilization vs allocation).
package utilization

import (
	"cmp"
	"slices"

	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
)

// ProjectUsage is one project's utilization, in GPUs (fractions of a GPU
// summed over its tenants) unless named otherwise.
type ProjectUsage struct {
	Project string `json:"project"`
	// Allocated is what the project's tenants were given (their requests,
	// a whole GPU for a whole-GPU task), as reported by the nodes.
	Allocated float64 `json:"allocated_gpus"`
	// UsedMemory: GPU memory its processes use, as GPUs of memory.
	UsedMemory float64 `json:"used_memory_gpus"`
	// UsedCompute: SM utilization of its processes, as GPUs of compute.
	UsedCompute float64 `json:"used_compute_gpus"`
	// Idle is the part of the allocation neither memory nor compute uses:
	// per tenant, request - max(memory used, compute used), at least 0.
	Idle float64 `json:"idle_gpus"`
	// Borrowed is memory used above the request (burst), per tenant.
	Borrowed   float64 `json:"borrowed_gpus"`
	UsedMiB    uint64  `json:"used_mib"`
	RequestMiB uint64  `json:"request_mib"`
	Tenants    int     `json:"tenants"`
}

// Summarize sums the tenants of the reports per project; projectOf names
// the project of a namespace's job.
func Summarize(reports []nodeusage.Report, projectOf func(namespace, job string) string) []ProjectUsage {
	by := map[string]*ProjectUsage{}
	for _, r := range reports {
		for _, tn := range r.Tenants {
			name := projectOf(tn.Namespace, tn.Job)
			p := by[name]
			if p == nil {
				p = &ProjectUsage{Project: name}
				by[name] = p
			}
			add(p, tn)
		}
	}
	out := make([]ProjectUsage, 0, len(by))
	for _, p := range by {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b ProjectUsage) int { return cmp.Compare(a.Project, b.Project) })
	return out
}

// add adds one tenant's line to its project.
func add(p *ProjectUsage, tn nodeusage.Tenant) {
	mem := 0.0
	if tn.GPUMiB > 0 {
		mem = float64(tn.UsedMiB) / float64(tn.GPUMiB)
	}
	sm := float64(tn.SMPct) / 100
	p.Tenants++
	p.Allocated += tn.Request
	p.UsedMemory += mem
	p.UsedCompute += sm
	p.Idle += max(0, tn.Request-max(mem, sm))
	p.Borrowed += max(0, mem-tn.Request)
	p.UsedMiB += tn.UsedMiB
	p.RequestMiB += tn.RequestMiB
}
