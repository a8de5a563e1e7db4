package plan

import (
	"cmp"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// victimKey is what decides the order in which running jobs are suspended.
type victimKey struct {
	projectPriority int
	// overDeserved is how far the job's project is above its deserved
	// share (negative when below).
	overDeserved model.Shares
	jobPriority  int
	// start is the job's newest allocation start.
	start int64
	job   string
}

// compareVictims is THE victim order (BACKGROUND section 2): lowest project
// priority first, then the project most over its fair share, then lowest job
// priority, then the newest job; the job name breaks remaining ties so that
// plans are deterministic. It returns a negative number when a is suspended
// before b.
func compareVictims(a, b victimKey) int {
	if c := cmp.Compare(a.projectPriority, b.projectPriority); c != 0 {
		return c
	}
	if c := cmp.Compare(b.overDeserved, a.overDeserved); c != 0 {
		return c
	}
	if c := cmp.Compare(a.jobPriority, b.jobPriority); c != 0 {
		return c
	}
	if c := cmp.Compare(b.start, a.start); c != 0 {
		return c
	}
	return cmp.Compare(a.job, b.job)
}

// compareJobs is compareVictims for two jobs of the same project, whose
// project fields are equal: lowest job priority, then newest, then name.
func (s *state) compareJobs(a, b int32) int {
	ja, jb := &s.jobs[a], &s.jobs[b]
	if c := cmp.Compare(ja.priority, jb.priority); c != 0 {
		return c
	}
	if c := cmp.Compare(jb.newest, ja.newest); c != 0 {
		return c
	}
	return cmp.Compare(ja.name, jb.name)
}

// victimSource walks one project's jobs in victim order. The project
// fields of the victim key do not change during a walk, so they are read
// once.
type victimSource struct {
	priority int
	over     model.Shares
	jobs     []int32
	pos      int
}

// before reports whether a's next job is suspended before b's
// (compareVictims on their keys).
func (s *state) before(a, b *victimSource) bool {
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	if a.over != b.over {
		return a.over > b.over
	}
	return s.compareJobs(a.jobs[a.pos], b.jobs[b.pos]) < 0
}

// victimQueue merges the sources of several projects into one stream in
// victim order: a binary heap on before. Sources usually differ in their
// project fields, so the root tends to stay the root for many jobs in a
// row and each step costs a couple of comparisons.
type victimQueue struct {
	s       *state
	sources []victimSource
}

func (q *victimQueue) down(i int) {
	n := len(q.sources)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q.s.before(&q.sources[r], &q.sources[l]) {
			m = r
		}
		if !q.s.before(&q.sources[m], &q.sources[i]) {
			return
		}
		q.sources[i], q.sources[m] = q.sources[m], q.sources[i]
		i = m
	}
}

func (q *victimQueue) init() {
	for i := len(q.sources)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

// next returns the next job in victim order, or -1.
func (q *victimQueue) next() int32 {
	if len(q.sources) == 0 {
		return -1
	}
	src := &q.sources[0]
	j := src.jobs[src.pos]
	src.pos++
	if src.pos == len(src.jobs) {
		last := len(q.sources) - 1
		q.sources[0] = q.sources[last]
		q.sources = q.sources[:last]
	}
	q.down(0)
	return j
}

// victimSearch says which jobs may be suspended for one workload.
type victimSearch struct {
	// projects whose jobs may be victims.
	projects []int32
	// floor[q] is the least project q may be left with, by project
	// position (the guarantee or the deserved share).
	floor func(q int32) model.Shares
	// belowPriority, when set, admits only jobs of lower priority
	// (preemption inside a project).
	belowPriority *int
	// exclude is the job of the workload itself.
	exclude int32
	// mustFree is how much the victims must free in all (to keep the
	// project under its limit); zero when only the fit matters.
	mustFree model.Shares
}

// findVictims takes jobs in victim order until t fits on one node, then
// puts back those not needed. It returns the node and the victims in the
// order they were taken, or ok false when no set of allowed victims makes t
// fit.
//
// The walk keeps, per touched node and GPU, what the victims taken so far
// free there, so that each step costs only the victim's own allocations.
func (s *state) findVictims(t placement.Task, vs victimSearch) (node int, victims []int32, ok bool) {
	q := victimQueue{s: s, sources: s.sourceBuf[:0]}
	for _, p := range vs.projects {
		if ps := &s.projects[p]; len(ps.jobs) > 0 {
			q.sources = append(q.sources, victimSource{priority: ps.priority, over: ps.usage - ps.deserved, jobs: ps.jobs})
		}
	}
	defer func() { s.sourceBuf = q.sources[:0] }()
	q.init()
	w := &s.walk
	w.reset(s)
	for j := q.next(); j >= 0; j = q.next() {
		job := &s.jobs[j]
		if job.suspended || j == vs.exclude {
			continue
		}
		if vs.belowPriority != nil && job.priority >= *vs.belowPriority {
			continue
		}
		p := job.project
		if s.projects[p].usage-w.taken(p)-job.usage < vs.floor(p) {
			continue
		}
		w.take(p, job.usage)
		for _, a := range job.allocs {
			n := s.allocs[a].node
			if w.add(s, n, j, a, t) && s.enough(int(n), t, w.victims[n], vs.mustFree) {
				return int(n), s.putBack(int(n), t, w.victims[n], vs.mustFree), true
			}
		}
	}
	return 0, nil, false
}

// walkState is findVictims' scratch space, reused from one search to the
// next; stamps tell stale entries from current ones.
type walkState struct {
	stamp int32
	// per project
	projectStamp []int32
	takenShares  []model.Shares
	// per node
	nodeStamp []int32
	victims   [][]int32
	open      []int32 // GPUs with room for the task
	cpu, mem  []int64
	// per GPU (global index)
	gpuStamp []int32
	freed    []int32
}

func (w *walkState) reset(s *state) {
	if w.projectStamp == nil {
		w.projectStamp = make([]int32, len(s.projects))
		w.takenShares = make([]model.Shares, len(s.projects))
		n := len(s.cluster.Nodes)
		w.nodeStamp, w.victims, w.open = make([]int32, n), make([][]int32, n), make([]int32, n)
		w.cpu, w.mem = make([]int64, n), make([]int64, n)
		w.gpuStamp, w.freed = make([]int32, len(s.index.FreeShares)), make([]int32, len(s.index.FreeShares))
	}
	w.stamp++
}

func (w *walkState) taken(p int32) model.Shares {
	if w.projectStamp[p] != w.stamp {
		return 0
	}
	return w.takenShares[p]
}

func (w *walkState) take(p int32, amount model.Shares) {
	if w.projectStamp[p] != w.stamp {
		w.projectStamp[p], w.takenShares[p] = w.stamp, 0
	}
	w.takenShares[p] += amount
}

// add records that victim job j frees allocation a on node n and reports
// whether the node may now fit t (enough GPUs with room, CPU and memory).
func (w *walkState) add(s *state, n int32, j int32, a int32, t placement.Task) bool {
	node := &s.cluster.Nodes[n]
	if w.nodeStamp[n] != w.stamp {
		w.nodeStamp[n] = w.stamp
		w.victims[n] = w.victims[n][:0]
		w.cpu[n], w.mem[n] = node.FreeCPUMilli, node.FreeMemoryMiB
		open := int32(0)
		for _, g := range node.GPUs {
			if g.Free >= t.Shares && t.ModelAllowed(g.Model) {
				open++
			}
		}
		w.open[n] = open
	}
	if list := w.victims[n]; len(list) == 0 || list[len(list)-1] != j {
		w.victims[n] = append(list, j)
	}
	al := &s.allocs[a]
	w.cpu[n] += al.cpu
	w.mem[n] += al.mem
	shares := model.Shares(al.shares)
	base := s.index.GPUOffset[n]
	for _, g := range s.allocGPUs(al) {
		k := base + g
		if w.gpuStamp[k] != w.stamp {
			w.gpuStamp[k], w.freed[k] = w.stamp, 0
		}
		before := node.GPUs[g].Free + model.Shares(w.freed[k])
		w.freed[k] += int32(shares)
		if before < t.Shares && before+shares >= t.Shares && t.ModelAllowed(node.GPUs[g].Model) {
			w.open[n]++
		}
	}
	return w.open[n] >= int32(t.GPUCount) && w.cpu[n] >= t.CPUMilli && w.mem[n] >= t.MemoryMiB
}

// allocInfo is what an allocation holds, packed for the victim walk: its
// node, CPU, memory, and shares on each of its GPUs (gpuN GPUs listed
// from allocGPU[gpuOff]).
type allocInfo struct {
	cpu, mem     int64
	node         int32
	shares       int32
	gpuOff, gpuN int32
}

// allocNeeds is the shares an ask holds on each of its GPUs.
func allocNeeds(a *model.Ask) int32 {
	if a.WholeGPUs > 0 {
		return int32(model.SharesPerGPU)
	}
	return int32(a.Shares)
}

func (s *state) allocGPUs(al *allocInfo) []int32 {
	return s.allocGPU[al.gpuOff : al.gpuOff+al.gpuN]
}

// addAlloc records an allocation (running, or planned in this cycle) and
// returns its position in s.allocs.
func (s *state) addAlloc(node int, ask *model.Ask, gpus []int) int32 {
	off := int32(len(s.allocGPU))
	for _, g := range gpus {
		s.allocGPU = append(s.allocGPU, int32(g))
	}
	s.allocs = append(s.allocs, allocInfo{cpu: ask.CPUMilli, mem: ask.MemoryMiB, node: int32(node), shares: allocNeeds(ask), gpuOff: off, gpuN: int32(len(gpus))})
	return int32(len(s.allocs) - 1)
}

// putBack drops, from the last but one back to the first, every victim
// without which t still fits.
func (s *state) putBack(n int, t placement.Task, victims []int32, mustFree model.Shares) []int32 {
	kept := append([]int32(nil), victims...)
	for i := len(kept) - 2; i >= 0; i-- {
		without := append(append([]int32(nil), kept[:i]...), kept[i+1:]...)
		if s.enough(n, t, without, mustFree) {
			kept = without
		}
	}
	return kept
}

// enough reports whether t fits on node n once the victims' allocations
// there are gone, and whether the victims free at least mustFree in all.
func (s *state) enough(n int, t placement.Task, victims []int32, mustFree model.Shares) bool {
	var freed model.Shares
	node := &s.cluster.Nodes[n]
	cpu, mem := node.FreeCPUMilli, node.FreeMemoryMiB
	var buf [16]model.Shares
	free := buf[:0]
	for _, g := range node.GPUs {
		free = append(free, g.Free)
	}
	for _, j := range victims {
		freed += s.jobs[j].usage
		for _, a := range s.jobs[j].allocs {
			al := &s.allocs[a]
			if int(al.node) != n {
				continue
			}
			cpu += al.cpu
			mem += al.mem
			for _, g := range s.allocGPUs(al) {
				free[g] += model.Shares(al.shares)
			}
		}
	}
	if freed < mustFree || cpu < t.CPUMilli || mem < t.MemoryMiB {
		return false
	}
	found := 0
	for g := range free {
		if free[g] >= t.Shares && t.ModelAllowed(node.GPUs[g].Model) {
			found++
		}
	}
	return found >= t.GPUCount
}
