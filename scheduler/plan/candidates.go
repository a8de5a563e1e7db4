package plan

import (
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// DefaultPlacementCandidates is the number of nodes a placement policy
// scores for one placement when Options.PlacementCandidates is 0: as many
// as Nomad scores for a task group with a node affinity (the placement
// ranking's), so the plan predicts no wider a search than Nomad makes.
const DefaultPlacementCandidates = 100

// candidateBound is the number of nodes the policy scores for one
// placement (0: every node) for Options.PlacementCandidates n. Policies
// that sample the nodes themselves (see samplesItself) are not bounded.
func candidateBound(n int, p placement.Policy) int {
	switch {
	case p == nil || n < 0 || samplesItself(p):
		return 0
	case n == 0:
		return DefaultPlacementCandidates
	}
	return n
}

// samplesItself reports whether policy p already chooses among a random
// sample of the feasible nodes, as Nomad does: random (one feasible node
// drawn uniformly) and the deployed models (Nomad's own limit, in a random
// order). A candidate set taken in cluster order would bias them toward
// the first nodes.
func samplesItself(p placement.Policy) bool {
	name := p.Name()
	return name == "random" || strings.HasPrefix(name, "deployed")
}

// poolTally keeps, per GPU model (as placement sees it, modes folded in),
// the number of GPUs and their free shares over the whole cluster, up to
// date as capacity changes (see clusterState.summarize), so that the node
// standing in for the rest of the cluster (restNode) costs one entry per
// model, not a walk over every node.
type poolTally struct {
	models []string
	gpus   []int
	free   []model.Shares
	// modelOf is each GPU's model, and seen its free shares as last
	// counted, both flat in node order from start[n].
	start   []int32
	modelOf []int32
	seen    []model.Shares
	// exact is set once a restNode carried each model's GPU count (see
	// restNode).
	exact bool
	// scratch for restNode: per model, the candidates' GPUs and free shares.
	candGPUs []int
	candFree []model.Shares
}

// initPools counts every GPU of the cluster into the pool tally, once per
// cycle; countPools keeps it up to date from then on.
func (c *clusterState) initPools() {
	p := &c.pools
	index := map[string]int32{}
	p.start = make([]int32, len(c.Nodes)+1)
	total := 0
	for n := range c.Nodes {
		total += len(c.Nodes[n].GPUs)
	}
	p.modelOf, p.seen = make([]int32, 0, total), make([]model.Shares, 0, total)
	for n := range c.Nodes {
		p.start[n] = int32(len(p.modelOf))
		for _, g := range c.Nodes[n].GPUs {
			m, ok := index[g.Model]
			if !ok {
				m = int32(len(p.models))
				index[g.Model] = m
				p.models = append(p.models, g.Model)
				p.gpus = append(p.gpus, 0)
				p.free = append(p.free, 0)
			}
			p.modelOf = append(p.modelOf, m)
			p.seen = append(p.seen, g.Free)
			p.gpus[m]++
			p.free[m] += g.Free
		}
	}
	p.start[len(c.Nodes)] = int32(len(p.modelOf))
	p.candGPUs = make([]int, len(p.models))
	p.candFree = make([]model.Shares, len(p.models))
}

// countPools refreshes node n's part of the pool tally.
func (c *clusterState) countPools(n int) {
	p := &c.pools
	if p.start == nil {
		return
	}
	at := int(p.start[n])
	for g := range c.Nodes[n].GPUs {
		free := c.Nodes[n].GPUs[g].Free
		p.free[p.modelOf[at+g]] += free - p.seen[at+g]
		p.seen[at+g] = free
	}
}

// bounded reports whether placements for the nodes table (nil: all) are
// searched among candidates (placeCandidates): when the policy is bounded
// and more nodes than the bound admit the task. Otherwise the policy
// scores every node it may use, as it always did on small clusters.
func (c *clusterState) bounded(nodes []bool) bool {
	if c.bound <= 0 {
		return false
	}
	if nodes == nil {
		return len(c.Nodes) > c.bound
	}
	return c.admitted(nodes) > c.bound
}

// admitted is the number of nodes in the table, counted once per table.
func (c *clusterState) admitted(nodes []bool) int {
	if len(nodes) == 0 {
		return 0
	}
	if k, ok := c.admittedBy[&nodes[0]]; ok {
		return k
	}
	k := 0
	for _, in := range nodes {
		if in {
			k++
		}
	}
	c.admittedBy[&nodes[0]] = k
	return k
}

// placeCandidates asks the policy to place t among the first c.bound
// nodes, in cluster order, that t may use (nodes; nil: all) and fits on,
// as Nomad scores only a limited number of feasible nodes. Nodes without
// room are skipped, so work finds the one node far down the order that
// has room. The policy sees the candidates plus restNode, which carries
// the free GPU capacity of every other node, so that what the policy
// weighs over the whole cluster (gpushare's GPU model pools) is as
// without the bound.
func (c *clusterState) placeCandidates(t placement.Task, nodes []bool) (placement.Choice, bool) {
	c.sub.Nodes, c.subNodes = c.sub.Nodes[:0], c.subNodes[:0]
	for n := range c.Nodes {
		if len(c.subNodes) == c.bound {
			break
		}
		if (nodes == nil || nodes[n]) && c.hasRoom(n, t) && c.fitsExactly(n, t) {
			c.sub.Nodes = append(c.sub.Nodes, c.Nodes[n])
			c.subNodes = append(c.subNodes, n)
		}
	}
	if len(c.subNodes) == 0 {
		return placement.Choice{}, false
	}
	c.sub.Nodes = append(c.sub.Nodes, c.restNode())
	ch, ok := c.policy.Place(&c.sub, t)
	if !ok {
		return ch, false
	}
	if ch.Node < 0 || ch.Node >= len(c.subNodes) {
		// The rest node has no room; choosing it is the policy's bug,
		// which Assign reports (ErrPlacement).
		ch.Node = -1
		return ch, true
	}
	ch.Node = c.subNodes[ch.Node]
	return ch, true
}

// restNode stands in for every node outside the candidates in c.sub: it
// has no room at all (free CPU and memory -1, as an unavailable node) and
// one GPU per model holding the free shares of that model's GPUs outside
// the candidates. The first time, it has as many GPUs of each model as
// there are outside the candidates (the first holding the free shares),
// because a policy may size the model pools on its first placement
// (gpushare's demand rates); after that one GPU per model keeps it small.
func (c *clusterState) restNode() placement.Node {
	p := &c.pools
	clear(p.candGPUs)
	clear(p.candFree)
	for _, n := range c.subNodes {
		at := int(p.start[n])
		for g := range c.Nodes[n].GPUs {
			m := p.modelOf[at+g]
			p.candGPUs[m]++
			p.candFree[m] += c.Nodes[n].GPUs[g].Free
		}
	}
	if !p.exact {
		c.restGPUs = make([]placement.GPU, 0, len(p.modelOf))
	}
	rest := placement.Node{Name: "(rest of the cluster)", FreeCPUMilli: -1, FreeMemoryMiB: -1, GPUs: c.restGPUs[:0]}
	for m, name := range p.models {
		count := 1
		if !p.exact {
			count = p.gpus[m] - p.candGPUs[m]
		}
		for i := range count {
			g := placement.GPU{Model: name}
			if i == 0 {
				g.Free = p.free[m] - p.candFree[m]
			}
			rest.GPUs = append(rest.GPUs, g)
		}
	}
	p.exact = true
	c.restGPUs = rest.GPUs
	return rest
}

// hasRoom reports whether node n's free CPU, memory and GPU summary admit
// t: the quick test before an exact one.
func (c *clusterState) hasRoom(n int, t placement.Task) bool {
	node := &c.Nodes[n]
	if node.FreeCPUMilli < t.CPUMilli || node.FreeMemoryMiB < t.MemoryMiB {
		return false
	}
	sum := c.summaries[n]
	return t.GPUCount == 0 || sum.maxFree >= t.Shares && (t.Shares < model.SharesPerGPU || sum.idle >= t.GPUCount)
}

// fitsExactly reports whether t fits node n's GPUs, models included
// (placement.Cluster.Fits without building the GPU list).
func (c *clusterState) fitsExactly(n int, t placement.Task) bool {
	if t.GPUCount == 0 {
		return true
	}
	k := 0
	for _, g := range c.Nodes[n].GPUs {
		if g.Free >= t.Shares && t.ModelAllowed(g.Model) {
			if k++; k == t.GPUCount {
				return true
			}
		}
	}
	return false
}
