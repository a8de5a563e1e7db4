package plan

import (
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// DefaultPlacementCandidates is the number of nodes a placement policy
// scores for one placement when Options.PlacementCandidates is 0: as many
// as Nomad scores for a task group with a node affinity (the placement
// ranking's), so the plan predicts no wider a search than Nomad makes.
const DefaultPlacementCandidates = 100

// candidateBound is the number of nodes the policy scores for one
// placement (0: every node) for Options.PlacementCandidates n. Policies
// that sample the nodes themselves (placement.Policy.SamplesNodes) are not
// bounded: candidates taken in cluster order would bias their sample
// toward the first nodes.
func candidateBound(n int, p placement.Policy) int {
	switch {
	case p == nil || n < 0 || p.SamplesNodes():
		return 0
	case n == 0:
		return DefaultPlacementCandidates
	}
	return n
}

// nodeSet is the nodes a workload may run on: a table by node position
// and its number in the snapshot's index (cluster.Index.PendingTable), or
// every node (everyNode: id -1, in nil).
type nodeSet struct {
	id int32
	in []bool
}

var everyNode = nodeSet{id: -1}

// pendingNodes is the node set of pending workload w.
func pendingNodes(x *cluster.Index, w int) nodeSet {
	return nodeSet{id: x.PendingTable[w], in: x.PendingNodes[w]}
}

// has reports whether node n is in the set.
func (s nodeSet) has(n int) bool { return s.in == nil || s.in[n] }

// poolTally is the GPU pools of the whole cluster (one per GPU model and
// mode, as placement.Cluster.Pools carries them to a bounded policy), kept
// up to date as capacity changes (see clusterState.summarize) so that a
// bounded placement costs one entry per pool, not a walk over every node.
type poolTally struct {
	pools []placement.Pool
	// poolOf is each GPU's pool, and seen its free shares as last
	// counted, both flat in node order from start[n].
	start  []int32
	poolOf []int32
	seen   []cluster.Shares
}

// initPools counts every GPU of the cluster into the pool tally, once per
// cycle; countPools keeps it up to date from then on.
func (c *clusterState) initPools() {
	p := &c.pools
	type key struct {
		model string
		mode  cluster.Mode
	}
	index := map[key]int32{}
	p.start = make([]int32, len(c.Nodes)+1)
	total := 0
	for n := range c.Nodes {
		total += len(c.Nodes[n].GPUs)
	}
	p.poolOf, p.seen = make([]int32, 0, total), make([]cluster.Shares, 0, total)
	for n := range c.Nodes {
		p.start[n] = int32(len(p.poolOf))
		for _, g := range c.Nodes[n].GPUs {
			k := key{g.Model, g.Mode}
			i, ok := index[k]
			if !ok {
				i = int32(len(p.pools))
				index[k] = i
				p.pools = append(p.pools, placement.Pool{Model: g.Model, Mode: g.Mode})
			}
			p.poolOf = append(p.poolOf, i)
			p.seen = append(p.seen, g.Free)
			p.pools[i].GPUs++
			p.pools[i].Free += g.Free
		}
	}
	p.start[len(c.Nodes)] = int32(len(p.poolOf))
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
		p.pools[p.poolOf[at+g]].Free += free - p.seen[at+g]
		p.seen[at+g] = free
	}
}

// bounded reports whether placements on the node set are searched among
// candidates (placeCandidates): when the policy is bounded and more nodes
// than the bound are in the set. Otherwise the policy scores every node
// it may use, as it always did on small clusters.
func (c *clusterState) bounded(nodes nodeSet) bool {
	if c.bound <= 0 {
		return false
	}
	if nodes.in == nil {
		return len(c.Nodes) > c.bound
	}
	return c.admitted(nodes) > c.bound
}

// admitted is the number of nodes in the set, counted once per table.
func (c *clusterState) admitted(nodes nodeSet) int {
	for int(nodes.id) >= len(c.admittedBy) {
		c.admittedBy = append(c.admittedBy, -1)
	}
	if k := c.admittedBy[nodes.id]; k >= 0 {
		return k
	}
	k := 0
	for _, in := range nodes.in {
		if in {
			k++
		}
	}
	c.admittedBy[nodes.id] = k
	return k
}

// placeCandidates asks the policy to place t among the first c.bound
// nodes, in cluster order, that t may use and fits on, as Nomad scores
// only a limited number of feasible nodes. Nodes without room are skipped,
// so work finds the one node far down the order that has room. The policy
// is given the cluster's GPU pools with the candidates
// (placement.Cluster.Pools), so that what it weighs over the whole
// cluster (gpushare's pool loss) is as without the bound.
func (c *clusterState) placeCandidates(t placement.Task, nodes nodeSet) (placement.Choice, bool) {
	c.sub.Nodes, c.subNodes = c.sub.Nodes[:0], c.subNodes[:0]
	for n := range c.Nodes {
		if len(c.subNodes) == c.bound {
			break
		}
		if nodes.has(n) && c.hasRoom(n, t) && c.fitsExactly(n, t) {
			c.sub.Nodes = append(c.sub.Nodes, c.Nodes[n])
			c.subNodes = append(c.subNodes, n)
		}
	}
	if len(c.subNodes) == 0 {
		return placement.Choice{}, false
	}
	c.sub.Pools = c.pools.pools
	return c.placeOnSub(t)
}

// hasRoom reports whether node n's free CPU, memory and GPU summary admit
// t: the quick test before an exact one.
func (c *clusterState) hasRoom(n int, t placement.Task) bool {
	node := &c.Nodes[n]
	if node.FreeCPUMilli < t.CPUMilli || node.FreeMemoryMiB < t.MemoryMiB {
		return false
	}
	sum := c.summaries[n]
	return t.GPUCount == 0 || sum.maxFree >= t.Shares && (t.Shares < cluster.SharesPerGPU || sum.idle >= t.GPUCount)
}

// fitsExactly reports whether t fits node n's GPUs, models and modes
// included (placement.Cluster.Fits without building the GPU list).
func (c *clusterState) fitsExactly(n int, t placement.Task) bool {
	if t.GPUCount == 0 {
		return true
	}
	k := 0
	for _, g := range c.Nodes[n].GPUs {
		if g.Free >= t.Shares && t.MayUse(g.Model, g.Mode) {
			if k++; k == t.GPUCount {
				return true
			}
		}
	}
	return false
}
