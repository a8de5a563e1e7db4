package placement

import (
	"fmt"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// Ranking is the mechanism by which real Nomad placements follow gpushare's
// measure without patching Nomad: nodes publish, per class of task, whether
// a task of that class would grow our fragmentation measure there, and jobs
// carry an affinity on it. Nomad's own scoring then does the rest. The
// Deployed policy with a Ranking models the result.
//
// Classes: a task's class is its GPU ask and a power-of-two bound on its
// CPU ask (ClassKey: "s46-c8" is 0.46 of a GPU and at most 8 cores, "w1-c16"
// one whole GPU and at most 16 cores, "cpu-c32" no GPU and at most 32
// cores), so a job names its class from its own resources. The workload
// (the tasks running and waiting) gives each class its typical task: the
// mean CPU and memory of its tasks (Workload.Classes).
//
// What nodes publish: for every node and every class of the workload, a
// level 0 to len(Thresholds), the number of thresholds that the growth of
// fragmentation of placing the class's typical task on the node is at or
// below (0 where it does not fit). The growth is the gpushare measure (the
// FGD and fill measures' growths summed, in shares, against the workload;
// the pool loss of model-constrained work is left out: the publisher could
// add it, as it sees every node).
// A node's levels depend on that node's state only, so a placement changes
// the levels of the node it lands on and of no other node.
//
// What jobs carry: a job of class c has one affinity per level k,
// `${meta.<MetaPrefix><c>} >= k` with equal weights, so Nomad's affinity
// score is level/len(Thresholds). Having an affinity raises the number of
// nodes Nomad scores from 2 (batch) or ceil(log2 nodes) (service) to 100,
// and the affinity score is averaged with the bin-pack score. With
// GPULadder, a share job also carries device affinities that prefer the
// tightest share GPU (gpuScore).
//
// Deployed with the default thresholds (quota-service/ranking; what is
// and is not deployed: docs/design.md, Placement ranking), that is:
//
//   - The quota service, which already holds the cluster snapshot and the
//     workload (plan.PolicyByName builds it from running and waiting
//     allocations), computes Level for every node and class and writes it
//     as dynamic node metadata, "gpushare.rank.<class>" = "0" or "1"
//     (POST /v1/client/metadata with the node's ID; ACL node:write), each
//     cycle, writing only the nodes whose levels changed (unsetting
//     classes that left). Keys are HCL identifiers, as Nomad requires.
//   - Every job that may land on GPU nodes, CPU-only jobs included, carries
//     in its task group the affinity below, naming its own class. The
//     example jobspecs carry it; the quota service does not add it to work
//     it resumes (it registers the owner's spec as it was).
//   - With GPULadder (not deployed), the device plugin publishes on each share-mode GPU's
//     device group an attribute "free_shares" (its unallocated shares), and
//     a share job's device block carries, for slack 0, 10, 25 and 50,
//     `affinity { attribute = "${device.attr.free_shares}" operator = "<="
//     value = "<count+slack>" weight = 25 }`.
//
// The affinity of a job asking for 0.46 of a GPU and 6 cores:
//
//	affinity {
//	  attribute = "${meta.gpushare.rank.s46-c8}"
//	  value     = "1"
//	  weight    = 100
//	}
type Ranking struct {
	// Thresholds on the growth of fragmentation, in shares.
	Thresholds []float64
	// GPULadder: share jobs carry device affinities on the free shares of
	// each share GPU, which the plugin publishes as a device attribute.
	GPULadder bool
	// GPUJobsOnly: only jobs that ask for GPUs carry the affinities
	// (CPU-only jobs are placed as today).
	GPUJobsOnly bool
	// CPUJobsElsewhere: CPU-only jobs never run on the GPU nodes, as
	// with the node-pool recipe (docs/operator.md, Placement ranking for
	// jobs without the affinity): the GPU nodes form their own node pool
	// and only GPU work is placed there.
	CPUJobsElsewhere bool
	// Exact scores each task itself instead of its class's typical task
	// (an upper bound for measuring what the classes cost).
	Exact bool
	// DeviceAttribute publishes the levels as device-group attributes
	// (by the device plugin) instead of node metadata, and jobs carry
	// device affinities instead of node affinities: Nomad then scores no
	// more nodes than without the mechanism, and CPU-only jobs, which ask
	// for no device, cannot carry it. The alternative measured against
	// node metadata.
	DeviceAttribute bool
	// Lag is how many placements the published levels trail the cluster
	// by: 0 publishes at once; n > 0 publishes every node's levels every
	// n placements, so Nomad reads levels up to n placements old (node
	// metadata reaches the servers with the client's next node update,
	// about 5 s later).
	Lag int

	classes map[classKey]TaskType
	// published is the node states the levels were last published from
	// (with Lag), and since the placements since.
	published []Node
	since     int
	gs        *GPUShare
}

// MetaPrefix prefixes the node metadata keys of the published levels.
const MetaPrefix = "gpushare.rank."

// DefaultThresholds are the thresholds the deployment publishes: one, a
// level 1 where placing the class's task does not grow fragmentation.
var DefaultThresholds = []float64{0}

// NewRanking returns the ranking mechanism for workload w with the default
// thresholds and the GPU ladder, affinities on every job.
func NewRanking(w *Workload) *Ranking {
	r := &Ranking{Thresholds: DefaultThresholds, GPULadder: true, classes: map[classKey]TaskType{}, gs: NewGPUShare(nil, w)}
	for _, c := range w.Classes {
		r.classes[classOf(Task{CPUMilli: c.CPUMilli, GPUCount: c.GPUCount, Shares: c.Shares})] = c
	}
	return r
}

// classKey identifies a class: the GPU ask and the CPU bound.
type classKey struct {
	count    int
	shares   cluster.Shares
	cpuBound int64
}

func classOf(t Task) classKey {
	return classKey{count: t.GPUCount, shares: t.Shares, cpuBound: cpuBound(t.CPUMilli)}
}

// cpuBound is the smallest power-of-two number of cores, in milli-cores,
// at or above cpu (at least one core).
func cpuBound(cpu int64) int64 {
	b := int64(1000)
	for b < cpu {
		b *= 2
	}
	return b
}

// ClassOf is the typical task of t's class in the ranking's workload;
// false when the workload has no task of t's class (its job's affinity
// then matches no node).
func (r *Ranking) ClassOf(t Task) (TaskType, bool) {
	c, ok := r.classes[classOf(t)]
	return c, ok
}

// ClassKey is the name of t's class in the published metadata: its GPU ask
// ("cpu" for none, "s46" for 0.46 of a GPU, "w8" for eight whole GPUs) and
// its CPU bound in cores, for example "w1-c16".
func ClassKey(t Task) string {
	ask := fmt.Sprintf("w%d", t.GPUCount)
	switch {
	case t.GPUCount == 0:
		ask = "cpu"
	case t.Shares < cluster.SharesPerGPU:
		ask = fmt.Sprintf("s%d", t.Shares)
	}
	return fmt.Sprintf("%s-c%d", ask, cpuBound(t.CPUMilli)/1000)
}

// carries reports whether t's job carries the ranking affinities.
func (r *Ranking) carries(t Task) bool {
	return t.GPUCount > 0 || !r.GPUJobsOnly && !r.DeviceAttribute
}

// raisesLimit reports whether the job's affinities make Nomad score more
// nodes: node affinities do, device affinities do not.
func (r *Ranking) raisesLimit() bool { return !r.DeviceAttribute }

// Level is the level node n publishes for the class of t.
func (r *Ranking) Level(n *Node, t Task) int {
	probe := t
	if !r.Exact {
		c, ok := r.ClassOf(t)
		if !ok {
			return 0
		}
		probe = Task{CPUMilli: c.CPUMilli, MemoryMiB: c.MemoryMiB, GPUCount: c.GPUCount, Shares: c.Shares}
	}
	if !fitsNode(n, probe) {
		return 0
	}
	rk, _ := r.gs.bestOnNode(n, probe, 0)
	growth := rk.growth.fgd + rk.growth.fill
	level := 0
	for _, th := range r.Thresholds {
		if growth <= th {
			level++
		}
	}
	return level
}

// observe is called before each placement on c: with a Lag, it publishes
// every node's state anew each Lag placements.
func (r *Ranking) observe(c *Cluster) {
	if r.Lag == 0 {
		return
	}
	if r.published != nil && r.since < r.Lag {
		r.since++
		return
	}
	r.since = 1
	if len(r.published) != len(c.Nodes) {
		r.published = make([]Node, len(c.Nodes))
	}
	for i := range c.Nodes {
		gpus := append(r.published[i].GPUs[:0], c.Nodes[i].GPUs...)
		r.published[i] = c.Nodes[i]
		r.published[i].GPUs = gpus
	}
}

// nodeScore is Nomad's node-affinity score of node i of c for t's job,
// from the levels as last published.
func (r *Ranking) nodeScore(c *Cluster, i int, t Task) float64 {
	n := &c.Nodes[i]
	if r.Lag > 0 {
		n = &r.published[i]
	}
	return float64(r.Level(n, t)) / float64(len(r.Thresholds))
}

// gpuLadder is the slack, in shares, above a share job's ask of each step
// of its device-affinity ladder on a share GPU's free shares.
var gpuLadder = []cluster.Shares{0, 10, 25, 50}

// gpuScore is Nomad's device-affinity score of share GPU g for share t
// when the job carries the ladder `${device.attr.free_shares} <= ask+slack`
// for each slack in gpuLadder, with equal weights: the tighter the fit,
// the higher.
func (r *Ranking) gpuScore(g *GPU, t Task) float64 {
	s := 0
	for _, slack := range gpuLadder {
		if g.Free <= t.Shares+slack {
			s++
		}
	}
	return float64(s) / float64(len(gpuLadder))
}
