package placement

import (
	"fmt"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
)

// Ranking is the mechanism by which real Nomad placements follow gpushare's
// measure without patching Nomad: nodes publish, per class of task, how
// much our fragmentation measure would grow if such a task landed there,
// and jobs carry affinities on it. Nomad's own scoring then does the rest.
// The Deployed policy with a Ranking models the result.
//
// What is published: for every node and every class (the workload's common
// task shapes, see rankClasses and ClassKey), a level 0 to len(Thresholds):
// the number of thresholds that the growth of fragmentation (the gpushare
// measure, FGD's and fill's growth summed, in shares) of placing the
// class's task on the node is at or below; 0 where it does not fit.
// A node's levels depend on that node's state only, so a placement changes
// the levels of the node it lands on and of no other.
//
// What jobs carry: a job of class c has one node affinity per level k,
// `${meta.<MetaPrefix><c>} >= k` with equal weights, so Nomad's affinity
// score is level/len(Thresholds). Having an affinity raises the number of
// nodes Nomad scores from 2 (batch) to 100; the affinity score is averaged
// with the bin-pack score. A share job also carries a device affinity that
// prefers the tightest share GPU when GPULadder is set (see gpuScore).
type Ranking struct {
	// Thresholds on the growth of fragmentation, in shares, highest first.
	Thresholds []float64
	// GPULadder: share jobs carry device affinities on the free shares of
	// each share GPU, which the plugin publishes as a device attribute.
	GPULadder bool
	// GPUJobsOnly: only jobs that ask for GPUs carry the affinities
	// (CPU-only jobs are placed as today).
	GPUJobsOnly bool
	// Exact scores each task itself instead of its class's typical task
	// (an upper bound for measuring what the classes cost).
	Exact bool

	classes []TaskType
	gs      *GPUShare
}

// MetaPrefix prefixes the node metadata keys of the published levels.
const MetaPrefix = "gpushare.rank."

// DefaultThresholds are the thresholds the deployment publishes: a node is
// one level up when placing the task there does not grow fragmentation
// (growth at most 0), and one more when it shrinks it by a tenth of a GPU.
var DefaultThresholds = []float64{0}

// NewRanking returns the ranking mechanism for workload w with the default
// thresholds, the GPU ladder, and affinities on every job.
func NewRanking(w *Workload) *Ranking {
	return &Ranking{Thresholds: DefaultThresholds, GPULadder: true, classes: rankClasses(w), gs: NewGPUShare(nil, w)}
}

// rankClasses are the classes a ranking publishes for w: the workload's
// common task types without their model constraints (types that differ
// only in models are one class, with their weighted mean memory), and one
// more class for each GPU ask that no common type has (its tasks' mean CPU
// and memory), so that every job has a class with its GPU count.
func rankClasses(w *Workload) []TaskType {
	type key struct {
		count  int
		shares model.Shares
		cpu    int64
	}
	var classes []TaskType
	at := map[key]int{}
	asks := map[key]bool{}
	for _, t := range w.Types {
		k := key{t.GPUCount, t.Shares, t.CPUMilli}
		asks[key{count: t.GPUCount, shares: t.Shares}] = true
		i, ok := at[k]
		if !ok {
			at[k] = len(classes)
			classes = append(classes, TaskType{CPUMilli: t.CPUMilli, GPUCount: t.GPUCount, Shares: t.Shares})
			i = len(classes) - 1
		}
		c := &classes[i]
		mem := float64(c.MemoryMiB)*c.Weight + float64(t.MemoryMiB)*t.Weight
		c.Weight += t.Weight
		c.MemoryMiB = int64(mem / c.Weight)
	}
	for _, a := range w.Asks {
		if !asks[key{count: a.GPUCount, shares: a.Shares}] {
			classes = append(classes, a)
		}
	}
	return classes
}

// ClassOf is the class of t, whose levels its job's affinities name: of the
// classes with t's GPU count, the one with the nearest share size, then the
// nearest CPU ask; false when no class has t's GPU count.
func (r *Ranking) ClassOf(t Task) (TaskType, bool) {
	best := -1
	for i, c := range r.classes {
		if c.GPUCount != t.GPUCount {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := r.classes[best]
		ds, db := absShares(c.Shares-t.Shares), absShares(b.Shares-t.Shares)
		if ds < db || ds == db && abs64(c.CPUMilli-t.CPUMilli) < abs64(b.CPUMilli-t.CPUMilli) {
			best = i
		}
	}
	if best < 0 {
		return TaskType{}, false
	}
	return r.classes[best], true
}

// ClassKey is the name of a class in the published metadata: its GPU ask
// ("cpu" for none, "s46" for 0.46 of a GPU, "w8" for eight whole GPUs) and
// its CPU ask in milli-cores, for example "w1-11300".
func ClassKey(c TaskType) string {
	ask := fmt.Sprintf("w%d", c.GPUCount)
	switch {
	case c.GPUCount == 0:
		ask = "cpu"
	case c.Shares < model.SharesPerGPU:
		ask = fmt.Sprintf("s%d", c.Shares)
	}
	return fmt.Sprintf("%s-%d", ask, c.CPUMilli)
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

func absShares(s model.Shares) model.Shares {
	if s < 0 {
		return -s
	}
	return s
}

// carries reports whether t's job carries the ranking affinities.
func (r *Ranking) carries(t Task) bool {
	if r.GPUJobsOnly && t.GPUCount == 0 {
		return false
	}
	_, ok := r.ClassOf(t)
	return ok || r.Exact
}

// Level is the level node n publishes for the class of t.
func (r *Ranking) Level(n *Node, t Task) int {
	probe := t
	if !r.Exact {
		c, _ := r.ClassOf(t)
		probe = Task{CPUMilli: c.CPUMilli, MemoryMiB: c.MemoryMiB, GPUCount: c.GPUCount, Shares: c.Shares}
	}
	if !fitsNode(n, probe) {
		return 0
	}
	rk, _ := r.gs.bestOnNode(n, probe)
	growth := rk.growth.fgd + rk.growth.fill
	level := 0
	for _, th := range r.Thresholds {
		if growth <= th {
			level++
		}
	}
	return level
}

// nodeScore is Nomad's node-affinity score of n for t's job.
func (r *Ranking) nodeScore(n *Node, t Task) float64 {
	return float64(r.Level(n, t)) / float64(len(r.Thresholds))
}

// gpuLadder is the slack, in shares, above a share job's ask of each step
// of its device-affinity ladder on a share GPU's free shares.
var gpuLadder = []model.Shares{0, 10, 25, 50}

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
