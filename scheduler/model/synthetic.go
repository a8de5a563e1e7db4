package model

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
// with little whole-GPU room left, spread unevenly over projects so that some are over their
// guarantee and some under. Guarantees add up to 80% of the capacity.
func Synthetic(spec SyntheticSpec) *Snapshot {
	rng := rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9e3779b97f4a7c15))
	snap := &Snapshot{
		Nodes:       make([]Node, spec.Nodes),
		Projects:    make([]Project, spec.Projects),
		Allocations: make([]Allocation, 0, spec.Allocations),
		Pending:     make([]Pending, 0, spec.Pending),
	}
	models := []string{"A100", "H100"}
	gpus := make([]GPU, spec.Nodes*spec.GPUsPerNode) // one backing array for all nodes
	for n := range snap.Nodes {
		m := models[n%len(models)]
		node := gpus[n*spec.GPUsPerNode : (n+1)*spec.GPUsPerNode : (n+1)*spec.GPUsPerNode]
		for g := range node {
			node[g] = GPU{Model: m, MemoryMiB: 81920}
		}
		snap.Nodes[n] = Node{Name: "node-" + strconv.Itoa(n), CPUMilli: 128_000, MemoryMiB: 1 << 20, GPUs: node}
	}
	capacity := GPUs(spec.Nodes * spec.GPUsPerNode)
	perProject := capacity * 8 / 10 / Shares(max(spec.Projects, 1))
	for p := range snap.Projects {
		pr := Project{
			Name:            "project-" + strconv.Itoa(p),
			Guaranteed:      perProject/2 + Shares(rng.Int64N(int64(perProject)+1)),
			Priority:        rng.IntN(3),
			OverQuotaWeight: 1 + rng.Int64N(3),
		}
		if p%10 == 0 {
			pr.HasLimit, pr.Limit = true, pr.Guaranteed*2
		}
		snap.Projects[p] = pr
	}
	// Projects are drawn with a skew (the square of a uniform draw) so that
	// low-numbered projects run far above their guarantee.
	pickProject := func() int {
		u := rng.Float64()
		return int(u * u * float64(spec.Projects))
	}
	job, jobLeft, jobProject := "", 0, 0
	nextJob := func() {
		jobProject = pickProject()
		job = snap.Projects[jobProject].Name + "/job-" + strconv.Itoa(len(snap.Allocations))
		jobLeft = 1 + rng.IntN(3)
	}
	add := func(n, g int, ask Ask) {
		if jobLeft == 0 {
			nextJob()
		}
		jobLeft--
		snap.Allocations = append(snap.Allocations, Allocation{
			ID:          "alloc-" + strconv.Itoa(len(snap.Allocations)),
			Project:     snap.Projects[jobProject].Name,
			Job:         job,
			Group:       "main",
			Priority:    rng.IntN(3) * 10,
			Preemptible: rng.IntN(20) != 0,
			Ask:         ask,
			Node:        snap.Nodes[n].Name,
			GPUs:        []int{g},
			Start:       int64(len(snap.Allocations)),
		})
	}
	shareSizes := []Shares{15, 20}
	half := spec.GPUsPerNode / 2
	for n := 0; n < spec.Nodes && len(snap.Allocations) < spec.Allocations; n++ {
		for g := 0; g < spec.GPUsPerNode && len(snap.Allocations) < spec.Allocations; g++ {
			if g < half {
				if rng.IntN(50) != 0 { // one whole GPU in fifty stays idle
					add(n, g, Ask{WholeGPUs: 1, CPUMilli: 4000, MemoryMiB: 32768})
				}
				continue
			}
			for range 4 {
				add(n, g, Ask{Shares: shareSizes[rng.IntN(len(shareSizes))], CPUMilli: 1000, MemoryMiB: 8192})
			}
		}
	}
	// Top up to the allocation count with small shares on the shared GPUs
	// (each has at least 0.2 left).
	for n := 0; n < spec.Nodes && len(snap.Allocations) < spec.Allocations; n++ {
		for g := half; g < spec.GPUsPerNode && len(snap.Allocations) < spec.Allocations; g++ {
			add(n, g, Ask{Shares: 5, CPUMilli: 500, MemoryMiB: 4096})
		}
	}
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
	return snap
}
