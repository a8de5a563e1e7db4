package plan

import (
	"maps"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// runningJobs is every running job of a snapshot and what its
// allocations hold, as a plan starts from them: the part of the state
// that the running cluster alone decides (a Planner keeps it from one
// plan to the next while that cluster stays the same).
type runningJobs struct {
	// byKey finds a job by name; jobs are the jobs in order of first
	// appearance in Snapshot.Allocations, and every job's allocs slice
	// points into one array, in job order; allocs holds the allocations
	// at their Snapshot.Allocations positions.
	byKey  map[string]int32
	jobs   []jobState
	allocs allocTable
}

// additions is how much a plan of snap may add to the running jobs: a job
// per pending workload, an allocation per instance and its GPUs (see
// registerPlanned).
type additions struct{ jobs, instances, gpus int }

func additionsOf(snap *cluster.Snapshot) additions {
	r := additions{jobs: len(snap.Pending)}
	for i := range snap.Pending {
		w := &snap.Pending[i]
		r.instances += w.Count
		r.gpus += w.Count * max(w.Ask.WholeGPUs, 1)
	}
	return r
}

// newRunningJobs records every running job of snap (indexed by x) and
// its allocations, with room for what a plan of snap adds.
func newRunningJobs(snap *cluster.Snapshot, x *cluster.Index) runningJobs {
	r := runningJobs{byKey: make(map[string]int32, len(snap.Allocations)/2+1)}
	allocJob, count := r.numberJobs(snap)
	add := additionsOf(snap)
	r.jobs = make([]jobState, len(count), len(count)+add.jobs)
	flat := make([]int32, len(snap.Allocations))
	offset := int32(0)
	for j, c := range count {
		r.jobs[j].allocs = flat[offset : offset : offset+c]
		offset += c
	}
	r.allocs.infos = make([]allocInfo, 0, len(snap.Allocations)+add.instances)
	r.allocs.gpus = make([]int32, 0, len(snap.Allocations)+add.gpus)
	r.allocs.onNode = nodeLists(x.AllocNode, len(snap.Nodes))
	for i, j := range allocJob {
		a := &snap.Allocations[i]
		n := int(x.AllocNode[i])
		r.allocs.add(j, n, &snap.Nodes[n], &a.Ask, a.GPUs)
		job := &r.jobs[j]
		if len(job.allocs) == 0 {
			job.name, job.project, job.priority, job.newest = a.Job, x.AllocProject[i], a.Priority, a.Start
		}
		job.allocs = append(job.allocs, int32(i))
		job.held += a.Ask.GPUShares()
		job.nonPreemptible = job.nonPreemptible || !a.Preemptible
		job.system = job.system || a.System
		if job.neverVictim == "" {
			job.neverVictim = a.NeverVictim
		}
		job.priority = max(job.priority, a.Priority)
		job.newest = max(job.newest, a.Start)
		if a.InMinRuntime {
			job.youngAllocs++
		}
		job.young = job.youngAllocs == len(job.allocs)
	}
	return r
}

// nodeLists makes, per node, an empty list with room for its running
// allocations, all in one array.
func nodeLists(allocNode []int32, nodes int) [][]int32 {
	count := make([]int32, nodes)
	for _, n := range allocNode {
		count[n]++
	}
	lists := make([][]int32, nodes)
	flat := make([]int32, len(allocNode))
	offset := int32(0)
	for n, c := range count {
		lists[n] = flat[offset : offset : offset+c]
		offset += c
	}
	return lists
}

// numberJobs numbers the running jobs in order of first appearance and
// returns every allocation's job number and every job's allocation count.
// Allocations of one job usually come one after another, so the map is
// asked only when the job changes.
func (r *runningJobs) numberJobs(snap *cluster.Snapshot) (allocJob, count []int32) {
	allocJob = make([]int32, len(snap.Allocations))
	lastJob, last := "", int32(-1)
	for i := range snap.Allocations {
		a := &snap.Allocations[i]
		if last < 0 || a.Job != lastJob {
			j, ok := r.byKey[a.Job]
			if !ok {
				j = int32(len(count))
				r.byKey[a.Job] = j
				count = append(count, 0)
			}
			lastJob, last = a.Job, j
		}
		allocJob[i] = last
		count[last]++
	}
	return allocJob, count
}

// clone is a copy of r, as newRunningJobs made it, that shares nothing a
// plan changes, with room for what a plan adds (add).
func (r *runningJobs) clone(add additions) runningJobs {
	out := runningJobs{byKey: maps.Clone(r.byKey)}
	out.jobs = make([]jobState, len(r.jobs), len(r.jobs)+add.jobs)
	copy(out.jobs, r.jobs)
	flat := make([]int32, 0, len(r.allocs.infos))
	for j := range out.jobs {
		job := &out.jobs[j]
		start := len(flat)
		flat = append(flat, job.allocs...)
		job.allocs = flat[start:len(flat):len(flat)]
	}
	out.allocs.infos = append(make([]allocInfo, 0, len(r.allocs.infos)+add.instances), r.allocs.infos...)
	out.allocs.gpus = append(make([]int32, 0, len(r.allocs.gpus)+add.gpus), r.allocs.gpus...)
	out.allocs.onNode = make([][]int32, len(r.allocs.onNode))
	onNode := make([]int32, 0, len(r.allocs.infos))
	for n, list := range r.allocs.onNode {
		start := len(onNode)
		onNode = append(onNode, list...)
		out.allocs.onNode[n] = onNode[start:len(onNode):len(onNode)]
	}
	return out
}
