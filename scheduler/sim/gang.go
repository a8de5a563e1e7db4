package sim

import (
	"fmt"
	"math/rand"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// The gang simulation measures what partially placed gangs cost: GPU-hours
// held by the allocations of gang jobs that do not all run, which do no
// work (a distributed training job starts only when every worker runs).
// A randomized workload of gang and single jobs arrives minute by minute
// on a cluster of whole GPUs; each minute Nomad places what fits, one
// allocation at a time in arrival order (first fit), as it does without
// the service; with the service, the quota service's plan then runs on
// what Nomad did (plan.Plan, carried out with plan.Apply). A job runs its
// duration once all of it runs; then it ends.

// GangConfig is one gang simulation run.
type GangConfig struct {
	Nodes, GPUsPerNode int
	// Minutes simulated; the workload arrives over the first two thirds.
	Minutes int
	// Load is the GPU demand arriving per minute, as a share of capacity
	// per job duration (1: a cluster kept exactly busy on average).
	Load float64
	Seed int64
	// Service runs the quota service's plan after Nomad each minute.
	Service bool
}

// GangResult is the outcome of a run.
type GangResult struct {
	// PartialGPUHours are GPU-hours held by gangs that run in part, read
	// at the end of every minute (after the service's plan, with it).
	PartialGPUHours float64
	// BusyGPUHours are GPU-hours held by jobs that run whole.
	BusyGPUHours float64
	// Arrived and Completed count jobs.
	Arrived, Completed int
}

// simJob is one job of the workload.
type simJob struct {
	name            string
	gang            bool
	instances, gpus int
	// arrive is the minute it arrives; left the minutes it still has to
	// run whole.
	arrive, left int
}

// gangWorkload draws the jobs: half of them gangs of 2 to 4 allocations
// of 2, 4 or 8 GPUs, half single allocations of 1 to 8 GPUs; durations of
// 20 to 180 minutes.
func gangWorkload(cfg GangConfig) []simJob {
	rng := rand.New(rand.NewSource(cfg.Seed))
	capacity := float64(cfg.Nodes * cfg.GPUsPerNode)
	const meanMinutes = 100.0
	var jobs []simJob
	arrived := 0.0
	for minute := 0; minute < cfg.Minutes*2/3; minute++ {
		for arrived < cfg.Load*capacity/meanMinutes*float64(minute+1) {
			j := simJob{name: fmt.Sprintf("job-%d", len(jobs)), arrive: minute, left: 20 + rng.Intn(161), instances: 1}
			if rng.Intn(2) == 0 {
				j.gang, j.instances, j.gpus = true, 2+rng.Intn(3), []int{2, 4, 8}[rng.Intn(3)]
			} else {
				j.gpus = []int{1, 2, 4, 8}[rng.Intn(4)]
			}
			arrived += float64(j.instances * j.gpus)
			jobs = append(jobs, j)
		}
	}
	return jobs
}

// RunGangs simulates one run.
func RunGangs(cfg GangConfig) (GangResult, error) {
	if cfg.Nodes <= 0 || cfg.GPUsPerNode < 8 || cfg.Minutes <= 0 || cfg.Load <= 0 {
		return GangResult{}, fmt.Errorf("sim: gang run needs nodes, at least 8 GPUs per node, minutes and load: %+v", cfg)
	}
	jobs := gangWorkload(cfg)
	byName := map[string]*simJob{}
	for i := range jobs {
		byName[jobs[i].name] = &jobs[i]
	}
	snap := &cluster.Snapshot{Projects: []cluster.Project{{Name: "p", Guaranteed: cluster.GPUs(cfg.Nodes * cfg.GPUsPerNode), OverQuotaWeight: 1}}}
	for n := range cfg.Nodes {
		node := cluster.Node{Name: fmt.Sprintf("n%03d", n), CPUMilli: 1 << 40, MemoryMiB: 1 << 40}
		for range cfg.GPUsPerNode {
			node.GPUs = append(node.GPUs, cluster.GPU{Model: "H100", Mode: cluster.ModeAny})
		}
		snap.Nodes = append(snap.Nodes, node)
	}
	res := GangResult{Arrived: len(jobs)}
	next := 0
	for minute := 0; minute < cfg.Minutes; minute++ {
		now := int64(minute)
		snap = progress(snap, byName, &res)
		for ; next < len(jobs) && jobs[next].arrive == minute; next++ {
			j := jobs[next]
			snap.Pending = append(snap.Pending, cluster.Pending{Project: "p", Job: j.name, Group: "main", Priority: 50, Preemptible: true,
				Ask: cluster.Ask{WholeGPUs: j.gpus}, Count: j.instances, Submit: now, Gang: j.gang})
		}
		nomadPlaces(snap, now)
		if cfg.Service {
			pl, err := plan.Plan(snap, plan.Options{})
			if err != nil {
				return res, fmt.Errorf("sim: minute %d: %w", minute, err)
			}
			snap = plan.Apply(snap, pl, now)
		}
		partial, busy := held(snap, byName)
		res.PartialGPUHours += float64(partial) / 60
		res.BusyGPUHours += float64(busy) / 60
	}
	return res, nil
}

// progress advances every job that runs whole by a minute and removes the
// allocations of those that are done.
func progress(snap *cluster.Snapshot, jobs map[string]*simJob, res *GangResult) *cluster.Snapshot {
	running := map[string]int{}
	for _, a := range snap.Allocations {
		running[a.Job]++
	}
	done := map[string]bool{}
	for name, n := range running {
		if j := jobs[name]; n == j.instances {
			if j.left--; j.left == 0 {
				done[name] = true
				res.Completed++
			}
		}
	}
	snap.Allocations = slices.DeleteFunc(snap.Allocations, func(a cluster.Allocation) bool { return done[a.Job] })
	return snap
}

// nomadPlaces places what Nomad would: every queued instance (not of a
// suspended job) in arrival order, first fit, each on its own.
func nomadPlaces(snap *cluster.Snapshot, now int64) {
	free := make([][]bool, len(snap.Nodes))
	index := map[string]int{}
	for n, node := range snap.Nodes {
		index[node.Name] = n
		free[n] = make([]bool, len(node.GPUs))
		for g := range free[n] {
			free[n][g] = true
		}
	}
	for _, a := range snap.Allocations {
		for _, g := range a.GPUs {
			free[index[a.Node]][g] = false
		}
	}
	slices.SortStableFunc(snap.Pending, func(x, y cluster.Pending) int { return int(x.Submit - y.Submit) })
	for i := range snap.Pending {
		w := &snap.Pending[i]
		for w.Count > 0 && !w.Suspended && !w.Shrunk {
			n, gpus := firstFit(free, w.Ask.WholeGPUs)
			if n < 0 {
				break
			}
			snap.Allocations = append(snap.Allocations, cluster.Allocation{ID: fmt.Sprintf("%s/%d@%d", w.Job, w.Count, now),
				Project: w.Project, Job: w.Job, Group: w.Group, Priority: w.Priority, Preemptible: w.Preemptible, Ask: w.Ask,
				Node: snap.Nodes[n].Name, GPUs: gpus, Start: now, Gang: w.Gang})
			w.Count--
		}
	}
	snap.Pending = slices.DeleteFunc(snap.Pending, func(w cluster.Pending) bool { return w.Count == 0 })
}

// firstFit takes k free GPUs on the first node that has them.
func firstFit(free [][]bool, k int) (int, []int) {
	for n, gpus := range free {
		var take []int
		for g, ok := range gpus {
			if ok && len(take) < k {
				take = append(take, g)
			}
		}
		if len(take) == k {
			for _, g := range take {
				gpus[g] = false
			}
			return n, take
		}
	}
	return -1, nil
}

// held counts GPUs held by gangs that run in part and by jobs that run
// whole.
func held(snap *cluster.Snapshot, jobs map[string]*simJob) (partial, busy int) {
	running := map[string]int{}
	for _, a := range snap.Allocations {
		running[a.Job]++
	}
	for name, n := range running {
		j := jobs[name]
		if n == j.instances {
			busy += n * j.gpus
		} else {
			partial += n * j.gpus
		}
	}
	return partial, busy
}
