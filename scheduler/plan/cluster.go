package plan

import (
	"slices"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// perGPU is what an ask takes on each GPU it is bound to.
func perGPU(a *model.Ask) model.Shares {
	if a.WholeGPUs > 0 {
		return model.SharesPerGPU
	}
	return a.Shares
}

// clusterState is the cluster being placed on: its free capacity as the
// plan so far leaves it, in package placement's terms, and what makes the
// search for idle room fast.
type clusterState struct {
	placement.Cluster
	// policy chooses nodes and GPUs on idle capacity; nil is first fit.
	policy placement.Policy
	// modes folds GPU modes into model names (see modeEncoding).
	modes modeEncoding
	// summaries speed up first fit, one per node; tally counts them.
	summaries []nodeSummary
	tally     nodeTally
	// releases counts the times capacity was given back; failed records,
	// per task shape, the count when it last failed to fit on idle
	// capacity (see placeIdle).
	releases int
	failed   map[shapeKey]int
	// bound is the number of candidate nodes the policy scores for one
	// placement (0: every node; see candidateBound); pools, admittedBy
	// and restGPUs serve the bounded search (placeCandidates).
	bound      int
	pools      poolTally
	admittedBy map[*bool]int
	restGPUs   []placement.GPU
	// sub and subNodes are the scratch space of placeAmong and
	// placeCandidates.
	sub      placement.Cluster
	subNodes []int
}

// newClusterState turns the snapshot's nodes and free capacity into a
// placement cluster. An unavailable node shows no room at all (free CPU
// and memory -1, below any ask, and no free GPU), so that neither a policy
// nor first fit puts anything there.
func newClusterState(snap *model.Snapshot, x *model.Index, opts Options) clusterState {
	c := clusterState{
		policy:     opts.Policy,
		bound:      candidateBound(opts.PlacementCandidates, opts.Policy),
		modes:      modeEncoding{encoded: map[string]string{}, allowed: map[string][]string{}},
		failed:     map[shapeKey]int{},
		admittedBy: map[*bool]int{},
	}
	c.Nodes = make([]placement.Node, len(snap.Nodes))
	seen := map[string]bool{}
	for n := range snap.Nodes {
		node := &snap.Nodes[n]
		gpus := make([]placement.GPU, len(node.GPUs))
		for g := range node.GPUs {
			gpu := &node.GPUs[g]
			if !seen[gpu.Model] {
				seen[gpu.Model] = true
				c.modes.names = append(c.modes.names, gpu.Model)
			}
			gpus[g] = placement.GPU{Model: c.modes.encode(gpu.Model, gpu.Mode), MemoryMiB: gpu.MemoryMiB, Free: x.Free(n, g)}
		}
		c.Nodes[n] = placement.Node{
			Name:          node.Name,
			CPUMilli:      node.CPUMilli,
			FreeCPUMilli:  x.FreeCPUMilli[n],
			MemoryMiB:     node.MemoryMiB,
			FreeMemoryMiB: x.FreeMemoryMiB[n],
			GPUs:          gpus,
		}
		if node.Unavailable != "" {
			c.Nodes[n].FreeCPUMilli, c.Nodes[n].FreeMemoryMiB = -1, -1
		}
	}
	slices.Sort(c.modes.names)
	return c
}

// task converts an ask to a placement task, with the models (and GPU modes)
// it may use.
func (c *clusterState) task(a model.Ask) placement.Task {
	t := placement.TaskOf(a)
	if t.GPUCount == 0 {
		return t
	}
	t.Models = c.modes.allowedFor(a)
	return t
}

const (
	modeWholeSuffix  = "\x00whole"
	modeSharedSuffix = "\x00shared"
	// modeMIGSuffix marks a MIG instance: no ask is ever allowed it, so the
	// planner neither places work there nor counts on the room a victim
	// frees there (Nomad places on MIG devices by itself).
	modeMIGSuffix = "\x00mig"
)

// modeEncoding folds a GPU's mode into its model name, so that package
// placement, which knows only models, puts a task only on GPUs whose mode
// admits it: a GPU in whole mode is model+modeWholeSuffix, one in shared
// mode model+modeSharedSuffix, and a task may use the plain model names
// and those with its own suffix.
type modeEncoding struct {
	// used is set once a GPU has a mode other than ModeAny.
	used bool
	// names are the plain model names on the cluster, sorted.
	names []string
	// encoded maps a model and mode to the encoded name; allowed maps an
	// ask's kind and model list to the encoded names it may use.
	encoded map[string]string
	allowed map[string][]string
}

// encode returns the model name placement sees for a GPU of model m in
// mode.
func (e *modeEncoding) encode(m string, mode model.Mode) string {
	if mode == model.ModeAny {
		return m
	}
	e.used = true
	key := m + mode.String()
	if name, ok := e.encoded[key]; ok {
		return name
	}
	name := m + modeWholeSuffix
	switch mode {
	case model.ModeShared:
		name = m + modeSharedSuffix
	case model.ModeMIG:
		name = m + modeMIGSuffix
	}
	e.encoded[key] = name
	return name
}

// allowedFor returns the model names a GPU ask may use.
func (e *modeEncoding) allowedFor(a model.Ask) []string {
	if !e.used {
		return a.Models
	}
	suffix := modeWholeSuffix
	if a.Shares > 0 {
		suffix = modeSharedSuffix
	}
	key := suffix + "\x00" + strings.Join(a.Models, "\x00")
	if m, ok := e.allowed[key]; ok {
		return m
	}
	var allowed []string
	for _, m := range e.names {
		if len(a.Models) == 0 || slices.Contains(a.Models, m) {
			allowed = append(allowed, m, m+suffix)
		}
	}
	if allowed == nil {
		allowed = []string{"\x00none"}
	}
	e.allowed[key] = allowed
	return allowed
}
