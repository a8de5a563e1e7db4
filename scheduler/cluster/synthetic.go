package cluster

import (
	"math/rand/v2"
	"strconv"
)

// SyntheticSpec sizes a synthetic snapshot.
type SyntheticSpec struct {
	Nodes       int
	GPUsPerNode int
	Allocations int
	Projects    int
	Pending     int
	Seed        uint64
}

// ScaleSpec is the scale the planner is benchmarked at: 5,000 nodes of 8
// GPUs, 100,000 running allocations, 500 projects, 1,000 pending workloads.
var ScaleSpec = SyntheticSpec{Nodes: 5000, GPUsPerNode: 8, Allocations: 100_000, Projects: 500, Pending: 1000, Seed: 1}

// Synthetic builds a busy cluster deterministically from spec.Seed, for
// benchmarks and load tests. Half of each node's GPUs are given whole, the
// other half in four shares of 0.15 or 0.2 (topped up with 0.05 shares to
// reach the allocation count); about nine tenths of the capacity is in use,
// with little whole-GPU room left, spread unevenly over projects so that
// some are over their guarantee and some under. Guarantees add up to 80% of
// the capacity; no project holds more than its limit.
func Synthetic(spec SyntheticSpec) *Snapshot {
	g := &synthetic{
		spec: spec,
		rng:  rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9e3779b97f4a7c15)),
		snap: &Snapshot{
			Nodes:       make([]Node, spec.Nodes),
			Projects:    make([]Project, spec.Projects),
			Allocations: make([]Allocation, 0, spec.Allocations),
			Pending:     make([]Pending, 0, spec.Pending),
		},
	}
	g.addNodes()
	g.addProjects()
	g.addAllocations()
	g.raiseLimits()
	g.addPending()
	return g.snap
}

// synthetic builds one synthetic snapshot. Its steps draw from rng in a
// fixed order, so a seed always gives the same snapshot.
type synthetic struct {
	spec SyntheticSpec
	rng  *rand.Rand
	snap *Snapshot
	// The job being filled with allocations: its name, project, and how
	// many allocations it still takes.
	job        string
	jobProject int
	jobLeft    int
}

// shareSizes are the share asks of the synthetic workload.
var shareSizes = []Shares{15, 20}

// addNodes adds the nodes, alternating two GPU models.
func (g *synthetic) addNodes() {
	spec := g.spec
	models := []string{"A100", "H100"}
	gpus := make([]GPU, spec.Nodes*spec.GPUsPerNode) // one backing array for all nodes
	for n := range g.snap.Nodes {
		m := models[n%len(models)]
		node := gpus[n*spec.GPUsPerNode : (n+1)*spec.GPUsPerNode : (n+1)*spec.GPUsPerNode]
		for i := range node {
			node[i] = GPU{Model: m, MemoryMiB: 81920}
		}
		g.snap.Nodes[n] = Node{Name: "node-" + strconv.Itoa(n), CPUMilli: 128_000, MemoryMiB: 1 << 20, GPUs: node}
	}
}

// addProjects adds the projects: guarantees adding up to about 80% of the
// capacity, every tenth project with a limit.
func (g *synthetic) addProjects() {
	capacity := GPUs(g.spec.Nodes * g.spec.GPUsPerNode)
	perProject := capacity * 8 / 10 / Shares(max(g.spec.Projects, 1))
	for p := range g.snap.Projects {
		pr := Project{
			Name:            "project-" + strconv.Itoa(p),
			Guaranteed:      perProject/2 + Shares(g.rng.Int64N(int64(perProject)+1)),
			Priority:        g.rng.IntN(3),
			OverQuotaWeight: 1 + g.rng.Int64N(3),
		}
		if p%10 == 0 {
			pr.HasLimit, pr.Limit = true, pr.Guaranteed*2
		}
		g.snap.Projects[p] = pr
	}
}

// addAllocations fills every node: the first half of its GPUs whole (one in
// fifty left idle), the other half in four shares; then tops up to the
// allocation count with small shares on the shared GPUs (each has at least
// 0.2 left).
func (g *synthetic) addAllocations() {
	spec, snap := g.spec, g.snap
	half := spec.GPUsPerNode / 2
	for n := 0; n < spec.Nodes && len(snap.Allocations) < spec.Allocations; n++ {
		for i := 0; i < spec.GPUsPerNode && len(snap.Allocations) < spec.Allocations; i++ {
			if i < half {
				if g.rng.IntN(50) != 0 {
					g.addAllocation(n, i, Ask{WholeGPUs: 1, CPUMilli: 4000, MemoryMiB: 32768})
				}
				continue
			}
			for range 4 {
				g.addAllocation(n, i, Ask{Shares: shareSizes[g.rng.IntN(len(shareSizes))], CPUMilli: 1000, MemoryMiB: 8192})
			}
		}
	}
	for n := 0; n < spec.Nodes && len(snap.Allocations) < spec.Allocations; n++ {
		for i := half; i < spec.GPUsPerNode && len(snap.Allocations) < spec.Allocations; i++ {
			g.addAllocation(n, i, Ask{Shares: 5, CPUMilli: 500, MemoryMiB: 4096})
		}
	}
}

// raiseLimits raises every limit to at least what its project holds: the
// quota service keeps projects within their limits (plan.holdToLimits), so
// a busy cluster in its steady state holds nothing above them. It draws
// nothing.
func (g *synthetic) raiseLimits() {
	held := map[string]Shares{}
	for i := range g.snap.Allocations {
		a := &g.snap.Allocations[i]
		held[a.Project] += a.Ask.GPUShares()
	}
	for i := range g.snap.Projects {
		if p := &g.snap.Projects[i]; p.HasLimit {
			p.Limit = max(p.Limit, held[p.Name])
		}
	}
}

// addAllocation adds one allocation of ask on GPU gpu of node n, to the
// current job or, when that is full, to a new one.
func (g *synthetic) addAllocation(n, gpu int, ask Ask) {
	snap := g.snap
	if g.jobLeft == 0 {
		g.nextJob()
	}
	g.jobLeft--
	snap.Allocations = append(snap.Allocations, Allocation{
		ID:          "alloc-" + strconv.Itoa(len(snap.Allocations)),
		Project:     snap.Projects[g.jobProject].Name,
		Job:         g.job,
		Group:       "main",
		Priority:    g.rng.IntN(3) * 10,
		Preemptible: g.rng.IntN(20) != 0,
		Ask:         ask,
		Node:        snap.Nodes[n].Name,
		GPUs:        []int{gpu},
		Start:       int64(len(snap.Allocations)),
	})
}

// nextJob starts a job of one to three allocations. Projects are drawn
// with a skew (the square of a uniform draw) so that low-numbered projects
// run far above their guarantee.
func (g *synthetic) nextJob() {
	u := g.rng.Float64()
	g.jobProject = int(u * u * float64(g.spec.Projects))
	g.job = g.snap.Projects[g.jobProject].Name + "/job-" + strconv.Itoa(len(g.snap.Allocations))
	g.jobLeft = 1 + g.rng.IntN(3)
}

// addPending adds the pending workloads: a third whole GPUs, the rest
// shares.
func (g *synthetic) addPending() {
	spec, snap, rng := g.spec, g.snap, g.rng
	for i := range spec.Pending {
		p := rng.IntN(spec.Projects)
		w := Pending{
			Project:     snap.Projects[p].Name,
			Job:         snap.Projects[p].Name + "/pending-" + strconv.Itoa(i),
			Group:       "main",
			Priority:    rng.IntN(3) * 10,
			Preemptible: true,
			Count:       1 + rng.IntN(2),
			Submit:      int64(spec.Allocations + i),
		}
		switch rng.IntN(3) {
		case 0:
			w.Ask = Ask{WholeGPUs: 1 + rng.IntN(2), CPUMilli: 4000, MemoryMiB: 32768}
		default:
			w.Ask = Ask{Shares: shareSizes[rng.IntN(len(shareSizes))] * Shares(1+rng.IntN(2)), CPUMilli: 1000, MemoryMiB: 8192}
		}
		snap.Pending = append(snap.Pending, w)
	}
}
