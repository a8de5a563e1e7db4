package plan

import (
	"cmp"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// victim is a job as the victim order sees it: the job and its project as
// they stand now. It points into state.jobs and state.projects, so it is
// only valid until the next job is added (see registerPlanned).
type victim struct {
	project *projectState
	job     *jobState
}

// compareVictims is THE victim order (docs/design.md, Victim order): lowest
// project priority first, then the project most over its deserved share,
// then lowest job priority, then the newest job; the job name breaks
// remaining ties so that plans are deterministic. It returns a negative
// number when a is suspended before b.
//
// Every victim list the planner walks is in this order: each project's jobs
// are sorted by it (compareJobs), and victimQueue merges the projects by it.
func compareVictims(a, b victim) int {
	if c := cmp.Compare(a.project.priority, b.project.priority); c != 0 {
		return c
	}
	if c := cmp.Compare(b.project.overDeserved(), a.project.overDeserved()); c != 0 {
		return c
	}
	if c := cmp.Compare(a.job.priority, b.job.priority); c != 0 {
		return c
	}
	if c := cmp.Compare(b.job.newest, a.job.newest); c != 0 {
		return c
	}
	return cmp.Compare(a.job.name, b.job.name)
}

// overDeserved is how far the project is above its deserved share
// (negative when below).
func (p *projectState) overDeserved() model.Shares { return p.usage - p.deserved }

// victim returns job j as the victim order sees it.
func (s *state) victim(j int32) victim {
	job := &s.jobs[j]
	return victim{project: &s.projects[job.project], job: job}
}

// compareJobs is compareVictims on two jobs.
func (s *state) compareJobs(a, b int32) int {
	return compareVictims(s.victim(a), s.victim(b))
}

// victimSource is one project's jobs in victim order, and the next one.
type victimSource struct {
	next victim
	jobs []int32
	pos  int
}

// victimQueue merges the sources of several projects into one stream in
// victim order: a binary heap on compareVictims of the sources' next jobs.
// Sources usually differ in their project fields, so the root tends to stay
// the root for many jobs in a row and each step costs a couple of
// comparisons. No job is added while a queue is in use, so the victims it
// holds stay valid.
type victimQueue struct {
	s       *state
	sources []victimSource
}

// newVictimQueue is the queue over the jobs of projects, built in buf.
func (s *state) newVictimQueue(projects []int32, buf []victimSource) victimQueue {
	q := victimQueue{s: s, sources: buf[:0]}
	for _, p := range projects {
		if jobs := s.projects[p].jobs; len(jobs) > 0 {
			q.sources = append(q.sources, victimSource{next: s.victim(jobs[0]), jobs: jobs})
		}
	}
	for i := len(q.sources)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
	return q
}

// less reports whether source a's next job is suspended before source b's.
func (q *victimQueue) less(a, b int) bool {
	return compareVictims(q.sources[a].next, q.sources[b].next) < 0
}

func (q *victimQueue) down(i int) {
	n := len(q.sources)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			return
		}
		q.sources[i], q.sources[m] = q.sources[m], q.sources[i]
		i = m
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
	if src.pos < len(src.jobs) {
		src.next = q.s.victim(src.jobs[src.pos])
	} else {
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
	w := &s.walk
	w.reset(s)
	q := s.newVictimQueue(vs.projects, w.sources)
	defer func() { w.sources = q.sources[:0] }()
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
			n := s.allocs.get(a).node
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
	// sources holds the victim queue.
	sources []victimSource
	stamp   int32
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
			if g.FreeMilli >= t.GPUMilli && t.ModelAllowed(g.Model) {
				open++
			}
		}
		w.open[n] = open
	}
	if list := w.victims[n]; len(list) == 0 || list[len(list)-1] != j {
		w.victims[n] = append(list, j)
	}
	al := s.allocs.get(a)
	w.cpu[n] += al.cpu
	w.mem[n] += al.mem
	amount := int(al.perGPU)
	base := s.index.GPUOffset[n]
	for _, g := range s.allocs.gpusOf(al) {
		k := base + g
		if w.gpuStamp[k] != w.stamp {
			w.gpuStamp[k], w.freed[k] = w.stamp, 0
		}
		before := node.GPUs[g].FreeMilli + int(w.freed[k])
		w.freed[k] += int32(amount)
		if before < t.GPUMilli && before+amount >= t.GPUMilli && t.ModelAllowed(node.GPUs[g].Model) {
			w.open[n]++
		}
	}
	return w.open[n] >= int32(t.GPUCount) && w.cpu[n] >= t.CPUMilli && w.mem[n] >= t.MemoryMiB
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
	var buf [16]int
	free := buf[:0]
	for _, g := range node.GPUs {
		free = append(free, g.FreeMilli)
	}
	for _, j := range victims {
		freed += s.jobs[j].usage
		for _, a := range s.jobs[j].allocs {
			al := s.allocs.get(a)
			if int(al.node) != n {
				continue
			}
			cpu += al.cpu
			mem += al.mem
			for _, g := range s.allocs.gpusOf(al) {
				free[g] += int(al.perGPU)
			}
		}
	}
	if freed < mustFree || cpu < t.CPUMilli || mem < t.MemoryMiB {
		return false
	}
	found := 0
	for g := range free {
		if free[g] >= t.GPUMilli && t.ModelAllowed(node.GPUs[g].Model) {
			found++
		}
	}
	return found >= t.GPUCount
}
