package placement

import (
	"fmt"
	"math/rand"
	"sort"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// Option configures a policy built by ByName.
type Option func(*options)

type options struct {
	workload *Workload
}

// WithWorkload gives a policy the expected task mix. Policies that measure
// fragmentation (fgd, gpushare) need it; the others ignore it.
func WithWorkload(w *Workload) Option {
	return func(o *options) { o.workload = w }
}

type constructor struct {
	needsWorkload bool
	build         func(rng *rand.Rand, w *Workload) Policy
}

var registry = map[string]constructor{
	"random":           {build: func(rng *rand.Rand, _ *Workload) Policy { return NewRandom(rng) }},
	"bestfit":          {build: func(rng *rand.Rand, _ *Workload) Policy { return NewBestFit(rng) }},
	"fgd":              {needsWorkload: true, build: func(rng *rand.Rand, w *Workload) Policy { return NewFGD(rng, w) }},
	"gpushare":         {needsWorkload: true, build: func(rng *rand.Rand, w *Workload) Policy { return NewGPUShare(rng, w) }},
	"gpushare-reserve": {needsWorkload: true, build: func(rng *rand.Rand, w *Workload) Policy { return NewGPUShareReserve(rng, w) }},
	"deployed":         {build: func(rng *rand.Rand, _ *Workload) Policy { return NewDeployed(rng, Batch, nil) }},
	"deployed-service": {build: func(rng *rand.Rand, _ *Workload) Policy { return NewDeployed(rng, Service, nil) }},
	"deployed-ranked": {needsWorkload: true, build: func(rng *rand.Rand, w *Workload) Policy {
		return NewDeployed(rng, Batch, NewRanking(w))
	}},
}

// Names lists the policy names ByName accepts, sorted.
func Names() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NeedsWorkload reports whether the named policy needs WithWorkload.
func NeedsWorkload(name string) bool {
	return registry[name].needsWorkload
}

// ByName builds the named policy. Its random choices (tie breaks) come from
// a generator seeded with seed, so that a run is the same for the same seed.
func ByName(name string, seed int64, opts ...Option) (Policy, error) {
	c, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("unknown placement policy %q (valid: %s)", name, strings.Join(Names(), ", "))
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if c.needsWorkload && o.workload == nil {
		return nil, fmt.Errorf("placement policy %q needs a workload (WithWorkload)", name)
	}
	return c.build(rand.New(rand.NewSource(seed)), o.workload), nil
}

// fitsNode reports whether t fits node n at all: CPU, memory and GPUs.
func fitsNode(n *Node, t Task) bool {
	if n.FreeCPUMilli < t.CPUMilli || n.FreeMemoryMiB < t.MemoryMiB {
		return false
	}
	if t.GPUCount == 0 {
		return true
	}
	k := 0
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.Free >= t.Shares && t.MayUse(g.Model, g.Mode) {
			k++
			if k == t.GPUCount {
				return true
			}
		}
	}
	return false
}

// lowestGPUs returns the lowest-numbered GPUs of n that fit t, or nil.
func lowestGPUs(n *Node, t Task) []int {
	if t.GPUCount == 0 {
		return nil
	}
	gpus := make([]int, 0, t.GPUCount)
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.Free >= t.Shares && t.MayUse(g.Model, g.Mode) {
			gpus = append(gpus, i)
			if len(gpus) == t.GPUCount {
				return gpus
			}
		}
	}
	return nil
}

// isShare reports whether t asks for part of one GPU.
func isShare(t Task) bool {
	return t.GPUCount == 1 && t.Shares < cluster.SharesPerGPU
}

// freeShares is the unallocated GPU capacity of n, summed over its GPUs.
func freeShares(n *Node) cluster.Shares {
	var s cluster.Shares
	for i := range n.GPUs {
		s += n.GPUs[i].Free
	}
	return s
}
