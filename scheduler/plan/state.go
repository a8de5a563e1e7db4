package plan

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/fairshare"
	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// projectState is a project's quota numbers during the walk.
type projectState struct {
	guaranteed, deserved, demand, cap model.Shares
	usage, nonPreemptible             model.Shares
	priority                          int
	// jobs are the project's suspendable jobs in victim order (see
	// compareVictims; the project fields are equal inside a project).
	jobs []int32
	// queue is the project's pending workloads in the order they are tried.
	queue []int32
}

// jobState is a running job: every allocation of one job.
type jobState struct {
	name        string
	project     int32
	priority    int
	preemptible bool
	suspended   bool
	// newest is the latest start among its allocations.
	newest int64
	usage  model.Shares
	allocs []int32
	count  int32
	// planned marks work placed in this cycle (see registerPlanned).
	planned bool
}

// plannedJob is what a job planned in this cycle consists of: the
// workloads placed and their Place actions.
type plannedJob struct {
	workloads []int32
	actions   []int32
}

// plannedStart is the start of work placed in this cycle: after every
// running allocation, all equal, as the next cycle will see them.
const plannedStart = math.MaxInt64

// instance is one placement of the workload being tried.
type instance struct {
	node   int32
	gpus   []int
	action int32
}

// state is one planning cycle in progress.
type state struct {
	snap     *model.Snapshot
	index    *model.Index
	policy   placement.Policy
	cluster  placement.Cluster
	projects []projectState
	jobs     []jobState
	jobByKey map[string]int32
	// allocs are the running allocations (positions as in
	// Snapshot.Allocations), packed; allocGPU holds their GPU indexes.
	allocs   []allocInfo
	allocGPU []int32
	// walk and sourceBuf are findVictims' reusable scratch space.
	walk      walkState
	sourceBuf []victimSource
	// models maps an ask kind and model list to the encoded model names
	// it may use (GPU modes are encoded in the model name).
	models     map[string][]string
	modeEncode map[string]string
	hasModes   bool
	baseModels []string
	// releases counts capacity given back; failed records, per task
	// shape, the count when it last failed to fit on idle capacity.
	releases int
	failed   map[shapeKey]int
	// summaries speed up first fit, one per node.
	summaries []nodeSummary

	actions  []action
	unplaced []Unplaced
	// undo reverts the current workload's changes (see rollback).
	undo []func()
	// instances are the current workload's placements so far.
	instances []instance
	// cancelled marks the Place actions of work taken back; takenBack
	// lists the workloads taken back since the last walk, placed says
	// which workloads are placed.
	cancelled map[int32]bool
	plannedOf map[int32]*plannedJob
	takenBack []int32
	placed    []bool
	// changes counts placements and releases; failedAt records, per
	// workload, the count when it last failed; placements counts the
	// workloads placed.
	changes    int
	failedAt   []int
	placements int
}

type action = Action

type shapeKey struct {
	cpu, mem int64
	count    int
	shares   model.Shares
	models   string
}

func newState(snap *model.Snapshot, opts Options) (*state, error) {
	x, err := snap.Index()
	if err != nil {
		return nil, err
	}
	s := &state{
		snap:       snap,
		index:      x,
		policy:     opts.Policy,
		projects:   make([]projectState, len(snap.Projects)),
		jobByKey:   make(map[string]int32, len(snap.Allocations)/2+1),
		models:     map[string][]string{},
		modeEncode: map[string]string{},
		failed:     map[shapeKey]int{},
		cancelled:  map[int32]bool{},
		plannedOf:  map[int32]*plannedJob{},
		placed:     make([]bool, len(snap.Pending)),
		failedAt:   make([]int, len(snap.Pending)),
	}
	s.buildCluster()
	deserved := fairshare.Deserved(snap.Capacity(), snap.Projects, demand(snap, x))
	d := demand(snap, x)
	for i := range snap.Projects {
		p := &snap.Projects[i]
		s.projects[i] = projectState{
			guaranteed:     p.Guaranteed,
			deserved:       deserved[i],
			demand:         d[i],
			cap:            p.Cap(),
			usage:          x.Usage[i],
			nonPreemptible: x.NonPreemptibleUsage[i],
			priority:       p.Priority,
		}
	}
	// Jobs in two passes: numbering (allocations of one job usually come
	// one after another, so the map is asked only when the job changes),
	// then the job records and one flat array of allocation positions
	// that every job's allocs slice points into.
	allocJob := make([]int32, len(snap.Allocations))
	var count []int32
	lastJob, last := "", int32(-1)
	for i := range snap.Allocations {
		a := &snap.Allocations[i]
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
	// Room for the work this cycle places (see registerPlanned).
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
		s.jobs[j].count = c
		offset += c
	}
	s.allocs = make([]allocInfo, 0, len(snap.Allocations)+instances)
	s.allocGPU = make([]int32, 0, len(snap.Allocations)+gpus)
	for i, j := range allocJob {
		a := &snap.Allocations[i]
		s.addAlloc(int(x.AllocNode[i]), &a.Ask, a.GPUs)
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
	for j := range s.jobs {
		if job := &s.jobs[j]; job.preemptible && job.usage > 0 {
			p := &s.projects[job.project]
			p.jobs = append(p.jobs, int32(j))
		}
	}
	for i := range s.projects {
		slices.SortFunc(s.projects[i].jobs, s.compareJobs)
	}
	return s, nil
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

const (
	modeWholeSuffix  = "\x00whole"
	modeSharedSuffix = "\x00shared"
)

// buildCluster turns the snapshot's nodes and free capacity into a
// placement cluster. A GPU's mode is folded into its model name, so that a
// task may only use GPUs whose mode admits it (see task).
func (s *state) buildCluster() {
	x := s.index
	s.cluster.Nodes = make([]placement.Node, len(s.snap.Nodes))
	seen := map[string]bool{}
	for n := range s.snap.Nodes {
		node := &s.snap.Nodes[n]
		gpus := make([]placement.GPU, len(node.GPUs))
		for g := range node.GPUs {
			gpu := &node.GPUs[g]
			if !seen[gpu.Model] {
				seen[gpu.Model] = true
				s.baseModels = append(s.baseModels, gpu.Model)
			}
			gpus[g] = placement.GPU{Model: s.encodeModel(gpu.Model, gpu.Mode), MemoryMiB: gpu.MemoryMiB, Free: x.Free(n, g)}
		}
		s.cluster.Nodes[n] = placement.Node{
			Name:          node.Name,
			CPUMilli:      node.CPUMilli,
			FreeCPUMilli:  x.FreeCPUMilli[n],
			MemoryMiB:     node.MemoryMiB,
			FreeMemoryMiB: x.FreeMemoryMiB[n],
			GPUs:          gpus,
		}
	}
	slices.Sort(s.baseModels)
}

func (s *state) encodeModel(m string, mode model.Mode) string {
	if mode == model.ModeAny {
		return m
	}
	s.hasModes = true
	key := m + mode.String()
	if e, ok := s.modeEncode[key]; ok {
		return e
	}
	e := m + modeWholeSuffix
	if mode == model.ModeShared {
		e = m + modeSharedSuffix
	}
	s.modeEncode[key] = e
	return e
}

// baseTask converts an ask to a placement task without model restrictions.
func baseTask(a model.Ask) placement.Task {
	t := placement.Task{CPUMilli: a.CPUMilli, MemoryMiB: a.MemoryMiB}
	switch {
	case a.WholeGPUs > 0:
		t.GPUCount, t.Shares = a.WholeGPUs, model.SharesPerGPU
	case a.Shares > 0:
		t.GPUCount, t.Shares = 1, a.Shares
	}
	return t
}

// task converts an ask to a placement task, with the models (and GPU modes)
// it may use.
func (s *state) task(a model.Ask) placement.Task {
	t := baseTask(a)
	if t.GPUCount == 0 {
		return t
	}
	if !s.hasModes {
		t.Models = a.Models
		return t
	}
	suffix := modeWholeSuffix
	if a.Shares > 0 {
		suffix = modeSharedSuffix
	}
	key := suffix + "\x00" + strings.Join(a.Models, "\x00")
	if m, ok := s.models[key]; ok {
		t.Models = m
		return t
	}
	var allowed []string
	for _, m := range s.baseModels {
		if len(a.Models) == 0 || slices.Contains(a.Models, m) {
			allowed = append(allowed, m, m+suffix)
		}
	}
	if allowed == nil {
		allowed = []string{"\x00none"}
	}
	s.models[key] = allowed
	t.Models = allowed
	return t
}

func shapeOf(t placement.Task) shapeKey {
	return shapeKey{cpu: t.CPUMilli, mem: t.MemoryMiB, count: t.GPUCount, shares: t.Shares, models: strings.Join(t.Models, "\x00")}
}
