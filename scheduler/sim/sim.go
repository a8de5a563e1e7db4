// Package sim is the trace-driven placement simulator behind the placement
// benchmark, following the method of the ATC'23 "Beware of Fragmentation"
// paper: the task list is shuffled with a seed; tasks arrive one by one and
// never leave; once the list is used up, tasks are drawn from it uniformly
// at random with replacement until the GPU demand that has arrived reaches
// 130% of the cluster's GPU capacity. A task that does not fit is dropped:
// it is a failed arrival, whose GPU demand counts as arrived, as in the
// paper's simulator (which counts such tasks among its failed pods). That
// holds too for a task no node could ever hold.
// The metric is the share of GPU capacity left unallocated when arrived
// demand reaches 100%; the allocation at the end (130%) is reported too.
//
// A run is a pure function of its inputs and seed.
package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// Default arrival levels, in shares of the cluster's GPU capacity.
const (
	DefaultReadAt = 1.0
	DefaultStopAt = 1.3
)

// Config is one simulation run.
type Config struct {
	Nodes []placement.Node
	Tasks []placement.Task
	// Policy places each task; it must be fresh (policies may keep caches
	// and random state).
	Policy placement.Policy
	// Seed drives the shuffle and the draws.
	Seed int64
	// ReadAt and StopAt are arrived GPU demand levels as shares of GPU
	// capacity (defaults 1.0 and 1.3).
	ReadAt, StopAt float64
	// Movable is the fraction of GPU tasks that may be moved once placed
	// (drawn per arrival from the seed); 0 turns consolidation off. A
	// task that fits nowhere is placed by moving at most
	// Consolidation.MaxMoves of them (placement.Consolidate; the default
	// limits when zero).
	Movable       float64
	Consolidation placement.ConsolidationLimits
}

// Result is the outcome of a run. Percentages are of the cluster's GPU
// capacity.
type Result struct {
	// UnallocAtRead is 100 - allocated GPU % when arrived demand first
	// reached ReadAt.
	UnallocAtRead float64
	// AllocAtStop is the allocated GPU % at the end of the run.
	AllocAtStop float64
	// Arrived, Placed and Failed count tasks: Failed are the arrivals
	// that found no place.
	Arrived, Placed, Failed int
	// Capacity is the cluster's GPU capacity.
	Capacity cluster.Shares
	// Moves counts the moves of movable tasks (Config.Movable), and
	// Consolidated the arrivals placed by them.
	Moves, Consolidated int
}

// Run simulates one seed. It copies the nodes; cfg is not changed.
func Run(cfg Config) (Result, error) {
	readAt, stopAt, err := cfg.levels()
	if err != nil {
		return Result{}, err
	}
	c := &placement.Cluster{Nodes: cloneNodes(cfg.Nodes)}
	capacity := cluster.GPUs(0)
	for _, n := range c.Nodes {
		capacity += cluster.GPUs(len(n.GPUs))
	}
	var gpuDemand cluster.Shares
	for _, t := range cfg.Tasks {
		gpuDemand += t.Demand()
	}
	if capacity == 0 || gpuDemand == 0 {
		return Result{}, errors.New("sim: no GPU capacity or no GPU demand")
	}
	return arrive(cfg, c, capacity, readAt*float64(capacity), stopAt*float64(capacity))
}

// levels checks cfg and returns its read and stop levels.
func (cfg Config) levels() (readAt, stopAt float64, err error) {
	if cfg.Policy == nil {
		return 0, 0, errors.New("sim: no policy")
	}
	if len(cfg.Tasks) == 0 {
		return 0, 0, errors.New("sim: no tasks")
	}
	readAt, stopAt = cmp.Or(cfg.ReadAt, DefaultReadAt), cmp.Or(cfg.StopAt, DefaultStopAt)
	if readAt > stopAt {
		return 0, 0, fmt.Errorf("sim: read level %.2f above stop level %.2f", readAt, stopAt)
	}
	return readAt, stopAt, nil
}

// arrive lets tasks arrive on c, the shuffled list and then random draws,
// until the next one would take arrived GPU demand past stopLevel, and
// reads the allocation when arrived demand first reaches readLevel.
func arrive(cfg Config, c *placement.Cluster, capacity cluster.Shares, readLevel, stopLevel float64) (Result, error) {
	res := Result{Capacity: capacity}
	unallocated := func(allocated cluster.Shares) float64 { return 100 - 100*float64(allocated)/float64(capacity) }
	next := arrivals(cfg.Tasks, cfg.Seed)
	mover := newMover(cfg)
	var arrived, allocated cluster.Shares
	read := false
	for i := 0; ; i++ {
		t := next()
		if float64(arrived+t.Demand()) > stopLevel {
			break
		}
		arrived += t.Demand()
		res.Arrived++
		placed, err := mover.place(c, t, &res)
		if err != nil {
			return res, fmt.Errorf("sim: policy %s: task %d: %w", cfg.Policy.Name(), i, err)
		}
		if placed {
			allocated += t.Demand()
			res.Placed++
		} else {
			res.Failed++
		}
		if !read && float64(arrived) >= readLevel {
			read = true
			res.UnallocAtRead = unallocated(allocated)
		}
	}
	if !read {
		res.UnallocAtRead = unallocated(allocated)
	}
	res.AllocAtStop = 100 - unallocated(allocated)
	return res, nil
}

// arrivals returns the tasks in the order a run with seed sees them: the
// list shuffled, then uniform draws with replacement, one per call.
func arrivals(tasks []placement.Task, seed int64) func() placement.Task {
	rng := rand.New(rand.NewSource(seed))
	order := rng.Perm(len(tasks))
	i := 0
	return func() placement.Task {
		defer func() { i++ }()
		if i < len(order) {
			return tasks[order[i]]
		}
		return tasks[rng.Intn(len(tasks))]
	}
}

func cloneNodes(nodes []placement.Node) []placement.Node {
	out := slices.Clone(nodes)
	for i := range out {
		out[i].GPUs = slices.Clone(out[i].GPUs)
	}
	return out
}
