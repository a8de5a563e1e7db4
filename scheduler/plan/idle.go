package plan

import (
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// nodeSummary is what the first-fit search reads to skip a node quickly.
type nodeSummary struct {
	maxFree cluster.Shares // the largest free amount of one GPU
	idle    int            // fully free GPUs
}

// nodeTally counts the nodes by their summary, so that a task no node
// could take is refused without a search: byIdle[k] nodes have k idle
// GPUs, byFree[f] nodes have f shares free on their emptiest GPU.
type nodeTally struct {
	byIdle []int32
	byFree [cluster.SharesPerGPU + 1]int32
}

func (c *clusterState) initSummaries() {
	c.summaries = make([]nodeSummary, len(c.Nodes))
	most := 0
	for n := range c.Nodes {
		most = max(most, len(c.Nodes[n].GPUs))
	}
	c.tally.byIdle = make([]int32, most+1)
	c.tally.byIdle[0] = int32(len(c.Nodes))
	c.tally.byFree[0] = int32(len(c.Nodes))
	for n := range c.Nodes {
		c.summarize(n)
	}
	if c.bound > 0 && len(c.Nodes) > c.bound {
		c.initPools()
	}
}

// summarize refreshes node n's summary after its free capacity changed.
func (c *clusterState) summarize(n int) {
	if c.summaries == nil {
		return
	}
	var sum nodeSummary
	for _, g := range c.Nodes[n].GPUs {
		sum.maxFree = max(sum.maxFree, g.Free)
		if g.Free >= cluster.SharesPerGPU {
			sum.idle++
		}
	}
	old := c.summaries[n]
	c.tally.byIdle[old.idle]--
	c.tally.byFree[old.maxFree]--
	c.tally.byIdle[sum.idle]++
	c.tally.byFree[sum.maxFree]++
	c.summaries[n] = sum
	c.countPools(n)
}

// mayFit reports whether some node's summary admits t: a node with
// GPUCount idle GPUs for whole GPUs, one with a GPU that has Shares free
// for a share.
func (c *clusterState) mayFit(t placement.Task) bool {
	var counts []int32
	from := 0
	switch {
	case t.GPUCount == 0 || c.summaries == nil:
		return true
	case t.Shares >= cluster.SharesPerGPU:
		counts, from = c.tally.byIdle, t.GPUCount
	default:
		counts, from = c.tally.byFree[:], int(t.Shares)
	}
	for k := from; k < len(counts); k++ {
		if counts[k] > 0 {
			return true
		}
	}
	return false
}

// shapeKey is what placeIdle remembers a failed task by: its shape and
// the node set it may use.
type shapeKey struct {
	cpu, mem int64
	count    int
	shares   cluster.Shares
	models   string
	nodes    int32
}

func shapeOf(t placement.Task, nodes nodeSet) shapeKey {
	return shapeKey{cpu: t.CPUMilli, mem: t.MemoryMiB, count: t.GPUCount, shares: t.Shares, models: strings.Join(t.Models, "\x00"), nodes: nodes.id}
}

// placeIdle finds room for t on free capacity of the nodes it may use, by
// first fit or with the policy: among a bounded number of candidates on a
// cluster larger than the bound (placeCandidates), else among every node
// it may use. A shape that failed is not searched again until capacity is
// given back.
func (c *clusterState) placeIdle(t placement.Task, nodes nodeSet) (placement.Choice, bool) {
	if !c.mayFit(t) {
		return placement.Choice{}, false
	}
	key := shapeOf(t, nodes)
	if at, ok := c.failed[key]; ok && at == c.releases {
		return placement.Choice{}, false
	}
	var ch placement.Choice
	var ok bool
	switch {
	case c.policy == nil:
		ch, ok = c.firstFit(t, nodes)
	case c.bounded(nodes):
		ch, ok = c.placeCandidates(t, nodes)
	case nodes.in == nil:
		ch, ok = c.policy.Place(&c.Cluster, t)
	default:
		ch, ok = c.placeAmong(t, nodes)
	}
	if !ok {
		c.failed[key] = c.releases
	}
	return ch, ok
}

// placeAmong asks the policy to place t on a cluster of the nodes it may
// use only.
func (c *clusterState) placeAmong(t placement.Task, nodes nodeSet) (placement.Choice, bool) {
	c.sub.Nodes, c.subNodes = c.sub.Nodes[:0], c.subNodes[:0]
	for n := range c.Nodes {
		if nodes.in[n] {
			c.sub.Nodes = append(c.sub.Nodes, c.Nodes[n])
			c.subNodes = append(c.subNodes, n)
		}
	}
	c.sub.Pools = nil
	return c.placeOnSub(t)
}

// placeOnSub asks the policy to place t on c.sub, whose nodes are
// c.subNodes of the cluster, and maps its choice back. A node index out of
// range, the policy's bug, becomes -1, which Assign reports
// (ErrPlacement).
func (c *clusterState) placeOnSub(t placement.Task) (placement.Choice, bool) {
	ch, ok := c.policy.Place(&c.sub, t)
	if !ok {
		return ch, false
	}
	if ch.Node < 0 || ch.Node >= len(c.subNodes) {
		ch.Node = -1
		return ch, true
	}
	ch.Node = c.subNodes[ch.Node]
	return ch, true
}

func (c *clusterState) firstFit(t placement.Task, nodes nodeSet) (placement.Choice, bool) {
	for n := range c.Nodes {
		if !nodes.has(n) || !c.hasRoom(n, t) {
			continue
		}
		if gpus, ok := c.Fits(n, t); ok {
			return placement.Choice{Node: n, GPUs: gpus}, true
		}
	}
	return placement.Choice{}, false
}
