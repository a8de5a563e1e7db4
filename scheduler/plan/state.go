package plan

import (
	"cmp"
	"math"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/fairshare"
	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// state is one planning cycle in progress.
type state struct {
	// snap is the snapshot planned on and index its lookup tables; both
	// are read-only.
	snap  *model.Snapshot
	index *model.Index
	// projects are the projects' quota numbers, in Snapshot.Projects
	// order, as the plan so far leaves them.
	projects []projectState
	// cluster is the capacity being placed on (see clusterState).
	cluster clusterState
	// jobs are the jobs that may be suspended: the running ones and, as
	// the next cycle will see it, the work placed in this cycle (see
	// registerPlanned); jobByKey finds them by name, and allocs holds
	// their allocations.
	jobs     []jobState
	jobByKey map[string]int32
	allocs   allocTable
	// plan is the plan built so far.
	plan planProgress
	// attempt is the workload being tried.
	attempt attempt
	// walk is findVictims' scratch space, reused from one search to the
	// next.
	walk walkState
}

// projectState is a project's quota numbers during the walk.
type projectState struct {
	guaranteed, deserved, demand, cap model.Shares
	usage, nonPreemptible             model.Shares
	priority                          int
	// jobs are the project's suspendable jobs in victim order.
	jobs []int32
	// queue is the project's pending workloads in the order they are tried.
	queue []int32
}

// jobState is a job that may be suspended: every allocation of one job.
type jobState struct {
	name        string
	project     int32
	priority    int
	preemptible bool
	suspended   bool
	// newest is the latest start among its allocations.
	newest int64
	usage  model.Shares
	// allocs are its positions in state.allocs.
	allocs []int32
	// planned marks work placed in this cycle (see registerPlanned).
	planned bool
}

// plannedStart is the start of work placed in this cycle: after every
// running allocation, all equal, as the next cycle will see them.
const plannedStart = math.MaxInt64

// allocTable is what the jobs' allocations hold, packed for the victim
// walk: the running allocations (at their Snapshot.Allocations positions),
// then those placed in this cycle.
type allocTable struct {
	infos []allocInfo
	// gpus holds every allocation's GPU indexes (see allocInfo).
	gpus []int32
}

// allocInfo is what one allocation holds: its node, CPU, memory, and on
// each of its GPUs perGPU (in placement's unit); its gpuN GPU indexes start
// at allocTable.gpus[gpuOff].
type allocInfo struct {
	cpu, mem     int64
	node         int32
	perGPU       int32
	gpuOff, gpuN int32
}

// get returns allocation a.
func (t *allocTable) get(a int32) *allocInfo { return &t.infos[a] }

// gpusOf returns the GPU indexes of al on its node.
func (t *allocTable) gpusOf(al *allocInfo) []int32 {
	return t.gpus[al.gpuOff : al.gpuOff+al.gpuN]
}

// add records an allocation (running, or placed in this cycle) and returns
// its position.
func (t *allocTable) add(node int, ask *model.Ask, gpus []int) int32 {
	off := int32(len(t.gpus))
	for _, g := range gpus {
		t.gpus = append(t.gpus, int32(g))
	}
	t.infos = append(t.infos, allocInfo{
		cpu: ask.CPUMilli, mem: ask.MemoryMiB, node: int32(node),
		perGPU: int32(placementGPU(perGPU(ask))), gpuOff: off, gpuN: int32(len(gpus)),
	})
	return int32(len(t.infos) - 1)
}

// planProgress is the plan built so far, and what the walk of the pending
// workloads keeps about it.
type planProgress struct {
	actions []Action
	// cancelled marks the Place actions of work taken back; they are left
	// out of the result.
	cancelled map[int32]bool
	unplaced  []Unplaced
	// placed says which workloads are placed; placements counts them.
	placed     []bool
	placements int
	// takenBack lists the workloads taken back since the last walk.
	takenBack []int32
	// planned is, per job placed in this cycle, what it consists of.
	planned map[int32]*plannedJob
	// changes counts placements and releases; failedAt records, per
	// workload, the count when it last failed.
	changes  int
	failedAt []int
}

// plannedJob is what a job placed in this cycle consists of: the workloads
// placed and their Place actions.
type plannedJob struct {
	workloads []int32
	actions   []int32
}

func newPlanProgress(pending int) planProgress {
	return planProgress{
		cancelled: map[int32]bool{},
		planned:   map[int32]*plannedJob{},
		placed:    make([]bool, pending),
		failedAt:  make([]int, pending),
	}
}

// attempt is the workload being tried: what it asks and may do, its
// placements so far, and how to undo them.
type attempt struct {
	// w and p are the positions of the workload and its project.
	w, p int
	wl   *model.Pending
	// task is one instance as placement sees it, inst its GPU amount.
	task placement.Task
	inst model.Shares
	// exclude is the workload's own job, never its victim (-1 if none).
	exclude int32
	// withinGuarantee and withinDeserved say whether the project stays
	// within its guarantee or deserved share once the workload runs.
	withinGuarantee, withinDeserved bool
	// resume prefixes the reasons of a suspended job's placements.
	resume string
	// firstAction is where the workload's actions start in plan.actions;
	// undo reverts its changes (see rollback).
	firstAction int
	undo        []func()
	// instances are its placements so far.
	instances []instance
}

// instance is one placement of the workload being tried.
type instance struct {
	node   int32
	gpus   []int
	action int32
}

func newState(snap *model.Snapshot, opts Options) (*state, error) {
	x, err := snap.Index()
	if err != nil {
		return nil, err
	}
	s := &state{
		snap:     snap,
		index:    x,
		projects: newProjects(snap, x),
		cluster:  newClusterState(snap, x, opts.Policy),
		jobByKey: make(map[string]int32, len(snap.Allocations)/2+1),
		plan:     newPlanProgress(len(snap.Pending)),
	}
	s.addRunningJobs()
	s.listVictims()
	return s, nil
}

// newProjects is every project's quota numbers before the plan, with its
// deserved share for the cycle.
func newProjects(snap *model.Snapshot, x *model.Index) []projectState {
	d := demand(snap, x)
	deserved := fairshare.Deserved(snap.Capacity(), snap.Projects, d)
	projects := make([]projectState, len(snap.Projects))
	for i := range snap.Projects {
		p := &snap.Projects[i]
		projects[i] = projectState{
			guaranteed:     p.Guaranteed,
			deserved:       deserved[i],
			demand:         d[i],
			cap:            p.Cap(),
			usage:          x.Usage[i],
			nonPreemptible: x.NonPreemptibleUsage[i],
			priority:       p.Priority,
		}
	}
	return projects
}

// addRunningJobs records every running job and its allocations. Every
// job's allocs slice points into one array of allocation positions; the
// tables have room for the work this cycle places (see registerPlanned).
func (s *state) addRunningJobs() {
	snap, x := s.snap, s.index
	allocJob, count := s.numberJobs()
	instances, gpus := 0, 0
	for i := range snap.Pending {
		w := &snap.Pending[i]
		instances += w.Count
		gpus += w.Count * max(w.Ask.WholeGPUs, 1)
	}
	s.jobs = make([]jobState, len(count), len(count)+len(snap.Pending))
	flat := make([]int32, len(snap.Allocations))
	offset := int32(0)
	for j, c := range count {
		s.jobs[j].allocs = flat[offset : offset : offset+c]
		offset += c
	}
	s.allocs.infos = make([]allocInfo, 0, len(snap.Allocations)+instances)
	s.allocs.gpus = make([]int32, 0, len(snap.Allocations)+gpus)
	for i, j := range allocJob {
		a := &snap.Allocations[i]
		s.allocs.add(int(x.AllocNode[i]), &a.Ask, a.GPUs)
		job := &s.jobs[j]
		if len(job.allocs) == 0 {
			job.name, job.project, job.priority, job.preemptible, job.newest = a.Job, x.AllocProject[i], a.Priority, true, a.Start
		}
		job.allocs = append(job.allocs, int32(i))
		job.usage += a.Ask.GPUShares()
		job.preemptible = job.preemptible && a.Preemptible
		job.priority = max(job.priority, a.Priority)
		job.newest = max(job.newest, a.Start)
	}
}

// numberJobs numbers the running jobs in order of first appearance and
// returns every allocation's job number and every job's allocation count.
// Allocations of one job usually come one after another, so the map is
// asked only when the job changes.
func (s *state) numberJobs() (allocJob, count []int32) {
	allocJob = make([]int32, len(s.snap.Allocations))
	lastJob, last := "", int32(-1)
	for i := range s.snap.Allocations {
		a := &s.snap.Allocations[i]
		if last < 0 || a.Job != lastJob {
			j, ok := s.jobByKey[a.Job]
			if !ok {
				j = int32(len(count))
				s.jobByKey[a.Job] = j
				count = append(count, 0)
			}
			lastJob, last = a.Job, j
		}
		allocJob[i] = last
		count[last]++
	}
	return allocJob, count
}

// listVictims puts every preemptible job that holds GPUs on its project's
// list of victims, in victim order.
func (s *state) listVictims() {
	for j := range s.jobs {
		if job := &s.jobs[j]; job.preemptible && job.usage > 0 {
			p := &s.projects[job.project]
			p.jobs = append(p.jobs, int32(j))
		}
	}
	for i := range s.projects {
		slices.SortFunc(s.projects[i].jobs, s.compareJobs)
	}
}

// compareQueued orders one project's pending workloads: higher priority,
// then earlier submit, then job and group name.
func (s *state) compareQueued(a, b int32) int {
	wa, wb := &s.snap.Pending[a], &s.snap.Pending[b]
	if c := cmp.Compare(wb.Priority, wa.Priority); c != 0 {
		return c
	}
	if c := cmp.Compare(wa.Submit, wb.Submit); c != 0 {
		return c
	}
	if c := cmp.Compare(wa.Job, wb.Job); c != 0 {
		return c
	}
	return cmp.Compare(wa.Group, wb.Group)
}
