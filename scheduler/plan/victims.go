package plan

import (
	"cmp"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// victim is a job as the victim order sees it: the job and its project as
// they stand now. It points into state.jobs and state.projects, so it is
// only valid until the next job is added (see registerPlanned).
type victim struct {
	project *projectState
	job     *jobState
}

// compareVictims is THE victim order (docs/design.md, Victim order): the
// instances above the minimum of elastic groups (shrink units, see
// listShrinks) before any whole job; then the lowest department priority
// first, then the department most over its deserved share (a project on
// its own stands for itself: see groupState); then the lowest project
// priority, then the project most over its deserved share,
// then lowest job priority, then the newest job; the job name breaks
// remaining ties so that plans are deterministic (between two instances of
// one job started together, the one listShrinks ranks first: the higher
// allocation ID). It returns a negative number when a is suspended before
// b.
//
// Every victim list the planner walks is in this order: each project's jobs
// are sorted by it (compareJobs), and victimQueue merges the projects by it.
func compareVictims(a, b victim) int {
	if a.job.shrink != b.job.shrink {
		if a.job.shrink {
			return -1
		}
		return 1
	}
	if ga, gb := a.project.group, b.project.group; ga != gb {
		if c := cmp.Compare(ga.priority, gb.priority); c != 0 {
			return c
		}
		if c := cmp.Compare(gb.overDeserved(), ga.overDeserved()); c != 0 {
			return c
		}
	}
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
	if c := cmp.Compare(a.job.name, b.job.name); c != 0 {
		return c
	}
	return cmp.Compare(a.job.rank, b.job.rank)
}

// overDeserved is how far the project is above its deserved share
// (negative when below).
func (p *projectState) overDeserved() cluster.Shares { return p.held - p.deserved }

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

// newVictimQueue is the queue over the jobs of projects (only those placed
// in this cycle, when plannedOnly) and their shrink units, built in buf.
func (s *state) newVictimQueue(projects []int32, plannedOnly bool, buf []victimSource) victimQueue {
	q := victimQueue{s: s, sources: buf[:0]}
	for _, p := range projects {
		jobs := s.projects[p].jobs
		if plannedOnly {
			jobs = s.projects[p].planned
		}
		if len(jobs) > 0 {
			q.sources = append(q.sources, victimSource{next: s.victim(jobs[0]), jobs: jobs})
		}
		if shrinks := s.projects[p].shrinks; !plannedOnly && len(shrinks) > 0 {
			q.sources = append(q.sources, victimSource{next: s.victim(shrinks[0]), jobs: shrinks})
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

// victimSearch says which jobs may be suspended for one workload, and
// where it may run.
type victimSearch struct {
	// projects whose jobs may be victims.
	projects []int32
	// floor[q] is the least project q may be left with, by project
	// position (the guarantee or the deserved share).
	floor func(q int32) cluster.Shares
	// groupFloor, when set, is the least a victim's department (or the
	// project on its own) may be left with: a reclaim across departments
	// keeps both levels' floors (docs/design.md, Departments).
	groupFloor func(g *groupState) cluster.Shares
	// belowPriority, when set, admits only jobs of lower priority
	// (preemption inside a project).
	belowPriority *int
	// exclude is the job of the workload itself.
	exclude int32
	// mustFree is how much the victims must free in all (to keep the
	// project under its limit); zero when only the fit matters.
	mustFree cluster.Shares
	// nodes are the nodes the workload may run on.
	nodes nodeSet
	// plannedOnly admits only work placed in this cycle (for a
	// reservation).
	plannedOnly bool
	// comeback, for reclaim, has a victim's project keep its floor even
	// should the victim come back by preempting its project's
	// lower-priority jobs (see keepsFloor).
	comeback bool
	// minRuntime spares jobs within their minimum runtime: reclaim for a
	// project above its guarantee and preemption inside a project
	// (docs/design.md, Minimum runtime).
	minRuntime bool
}

// allows reports whether job j may be a victim at all.
func (vs *victimSearch) allows(job *jobState, j int32) bool {
	return !job.suspended && j != vs.exclude && !(job.shrink && job.parent == vs.exclude) &&
		(vs.belowPriority == nil || job.priority < *vs.belowPriority) && (!vs.plannedOnly || job.planned) &&
		!(vs.minRuntime && job.young) && !job.fenced
}

// findVictims finds the victims that make room for t on one node, in two
// steps (docs/design.md, Victim order). First the node: jobs are taken in
// victim order, each charged against its project's floor only on the
// nodes it runs on, until t fits on one of them. Then the victims on that
// node (refine): its jobs are taken again in victim order, each project's
// amount above its deserved share measured anew after every victim taken,
// until t fits; then every victim not needed is put back. It returns the
// node and the victims in the order they were taken, or ok false when no
// set of allowed victims makes t fit.
//
// The first step keeps, per touched node and GPU, what the victims taken
// so far free there, so that each step costs only the victim's own
// allocations.
func (s *state) findVictims(t placement.Task, vs victimSearch) (node int, victims []int32, ok bool) {
	w := &s.walk
	w.reset(s)
	q := s.newVictimQueue(vs.projects, vs.plannedOnly, w.sources)
	defer func() { w.sources = q.sources[:0] }()
	for j := q.next(); j >= 0; j = q.next() {
		job := &s.jobs[j]
		if !vs.allows(job, j) || !s.inStopOrder(j) {
			continue
		}
		for _, a := range job.allocs {
			n := s.allocs.get(a).node
			if s.allocs.get(a).gone || !s.admits(vs.nodes, int(n)) || !w.accepts(s, n, j, t, &vs) {
				continue
			}
			if w.add(s, n, j, a, t) && s.enough(int(n), t, w.victims[n], vs.mustFree) {
				return int(n), s.uncovered(s.refine(int(n), t, vs, w.victims[n])), true
			}
		}
	}
	return 0, nil, false
}

// admits reports whether node n is available and in nodes.
func (s *state) admits(nodes nodeSet, n int) bool {
	return s.snap.Nodes[n].Unavailable == "" && nodes.has(n)
}

// refine chooses the victims on node n, where the first step found that
// the victims in found make room for t: the node's allowed jobs are taken
// in victim order, with every project's usage lowered by what is taken from
// it so that compareVictims sees the amount above its deserved share after
// each victim, skipping those that would leave their project below its
// floor, until t fits. Then every victim not needed is put back. Should
// that order not reach a fit (a victim it took first blocks, through its
// project's floor, one that was needed), the first step's victims are kept.
func (s *state) refine(n int, t placement.Task, vs victimSearch, found []int32) []int32 {
	cands := s.candidatesOn(n, vs)
	var taken []int32
	lowered := s.walk.lowered[:0]
	defer func() { s.walk.lowered = lowered[:0] }()
	fits := false
	for !fits {
		best := -1
		for i, j := range cands {
			if j < 0 {
				continue
			}
			job := &s.jobs[j]
			ps, freed := &s.projects[job.project], s.freedBy(j, taken)
			if !s.keepsFloor(j, ps.held-freed, ps.group.held-freed, taken, &vs) {
				cands[i] = -1
				continue
			}
			if best < 0 || compareVictims(s.victim(j), s.victim(cands[best])) < 0 {
				best = i
			}
		}
		if best < 0 {
			break
		}
		j := cands[best]
		cands[best] = -1
		freed := s.freedBy(j, taken)
		taken = append(taken, j)
		lowered = append(lowered, freed)
		s.projects[s.jobs[j].project].addHeld(-freed)
		fits = s.enough(n, t, taken, vs.mustFree)
	}
	for i, j := range taken {
		s.projects[s.jobs[j].project].addHeld(lowered[i])
	}
	if !fits {
		taken = found
	}
	return s.putBack(n, t, taken, &vs)
}

// candidatesOn lists, once each, the jobs with allocations on node n that
// the search allows as victims.
func (s *state) candidatesOn(n int, vs victimSearch) []int32 {
	w := &s.walk
	w.stamp++
	for _, p := range vs.projects {
		w.projectStamp[p] = w.stamp
	}
	var cands []int32
	for _, a := range s.allocs.onNode[n] {
		if s.allocs.get(a).gone {
			continue
		}
		for _, j := range [2]int32{s.allocs.get(a).job, s.shrinkOf(a)} {
			if j < 0 {
				continue
			}
			job := &s.jobs[j]
			if w.projectStamp[job.project] != w.stamp || !vs.allows(job, j) || !s.inStopOrder(j) || !job.holds(a) || slices.Contains(cands, j) {
				continue
			}
			if job.victim() {
				cands = append(cands, j)
			}
		}
	}
	return cands
}

// victim reports whether the job is on its project's list of victims (see
// listVictims).
func (job *jobState) victim() bool {
	return job.held > 0 && !job.system && job.neverVictim == "" && (!job.nonPreemptible || job.exposed)
}

// holds reports whether allocation a is one of the job's own (a job placed
// in this cycle, taken back and placed again, has new ones).
func (job *jobState) holds(a int32) bool { return slices.Contains(job.allocs, a) }

// walkState is findVictims' scratch space, reused from one search to the
// next; stamps tell stale entries from current ones.
type walkState struct {
	// sources holds the victim queue.
	sources []victimSource
	stamp   int32
	// per project: whether it is a search's (see candidatesOn).
	projectStamp []int32
	// per node: the victims taken there and the last job asked about
	// (decided, with its answer), the GPUs with room for the task, and
	// the free CPU and memory once the victims are gone.
	nodeStamp []int32
	victims   [][]int32
	decided   []int32
	accepted  []bool
	open      []int32
	cpu, mem  []int64
	// per GPU (global index)
	gpuStamp []int32
	freed    []int32
	// lowered is refine's scratch: what each victim taken lowered its
	// project's usage by.
	lowered []cluster.Shares
}

func (w *walkState) reset(s *state) {
	if w.projectStamp == nil {
		w.projectStamp = make([]int32, len(s.projects))
		n := len(s.cluster.Nodes)
		w.nodeStamp, w.victims, w.open = make([]int32, n), make([][]int32, n), make([]int32, n)
		w.decided, w.accepted = make([]int32, n), make([]bool, n)
		w.cpu, w.mem = make([]int64, n), make([]int64, n)
		w.gpuStamp, w.freed = make([]int32, len(s.index.FreeShares)), make([]int32, len(s.index.FreeShares))
	}
	w.stamp++
}

// touch starts node n's entries for this walk, once.
func (w *walkState) touch(s *state, n int32, t placement.Task) {
	if w.nodeStamp[n] == w.stamp {
		return
	}
	node := &s.cluster.Nodes[n]
	w.nodeStamp[n] = w.stamp
	w.victims[n] = w.victims[n][:0]
	w.decided[n] = -1
	w.cpu[n], w.mem[n] = node.FreeCPUMilli, node.FreeMemoryMiB
	open := int32(0)
	for _, g := range node.GPUs {
		if g.Free >= t.Shares && t.MayUse(g.Model, g.Mode) {
			open++
		}
	}
	w.open[n] = open
}

// accepts reports whether job j may join the victims on node n: its
// project keeps at least its floor once every victim taken there so far
// and j are gone. Victims taken on other nodes do not count: only one
// node's victims are suspended. The answer is kept for j's other
// allocations on n.
func (w *walkState) accepts(s *state, n int32, j int32, t placement.Task, vs *victimSearch) bool {
	w.touch(s, n, t)
	if w.decided[n] == j {
		return w.accepted[n]
	}
	job := &s.jobs[j]
	ps := &s.projects[job.project]
	left, groupLeft := ps.held-job.held, ps.group.held-job.held
	if s.shrinking {
		victims := append(w.victims[n][:len(w.victims[n]):len(w.victims[n])], j)
		left, groupLeft = ps.held-s.setFreed(job.project, victims), ps.group.held-s.groupFreed(ps.group, victims)
	} else {
		for _, k := range w.victims[n] {
			other := &s.jobs[k]
			if other.project == job.project {
				left -= other.held
			}
			if s.projects[other.project].group == ps.group {
				groupLeft -= other.held
			}
		}
	}
	w.decided[n], w.accepted[n] = j, s.keepsFloor(j, left, groupLeft, w.victims[n], vs)
	return w.accepted[n]
}

// keepsFloor reports whether job j's project, left with left once j and
// the victims in taken are gone, keeps its floor, and (when the search
// has a group floor) whether its group, left with groupLeft, keeps the
// group's. For a reclaim (vs.comeback) it must keep them even should j
// come back in the next cycle in place of its project's lower-priority
// jobs still running, as far as preemption inside the project, which
// keeps the project's own floor, would take them (comebackFrees):
// suspended, j is pending work of its project there. Without this, the
// reclaim would push the project below the floor it promised one cycle
// late, and the room that frees would displace the work the reclaim
// placed (docs/design.md, Victim order).
func (s *state) keepsFloor(j int32, left, groupLeft cluster.Shares, taken []int32, vs *victimSearch) bool {
	job := &s.jobs[j]
	floor := vs.floor(job.project)
	if left < floor {
		return false
	}
	groupFloor := cluster.Shares(-cluster.Unbounded)
	if vs.groupFloor != nil {
		if groupFloor = vs.groupFloor(s.projects[job.project].group); groupLeft < groupFloor {
			return false
		}
	}
	if !vs.comeback || job.shrink {
		// A shrunk instance comes back only by growth, which displaces
		// nothing.
		return true
	}
	back := job.held - s.comebackFrees(job, left, taken)
	return left+back >= floor && groupLeft+back >= groupFloor
}

// comebackFrees is the most suspended job's return could take from its
// project's lower-priority running jobs (not among taken) when the project
// holds left: preemption inside the project takes them in victim order
// and never below the project's own floor (see ownFloor), so it is the
// longest run of them, in that order, that the floor allows.
func (s *state) comebackFrees(job *jobState, left cluster.Shares, taken []int32) cluster.Shares {
	ps := &s.projects[job.project]
	own := ownFloor(left, ps.guaranteed, job.held)
	var freed cluster.Shares
	for _, k := range ps.jobs {
		other := &s.jobs[k]
		if other.priority >= job.priority {
			break
		}
		if other.suspended || slices.Contains(taken, k) {
			continue
		}
		if left-freed-other.held < own {
			break
		}
		freed += other.held
	}
	return freed
}

// add records that victim job j frees allocation a on node n and reports
// whether the node may now fit t (enough GPUs with room, CPU and memory).
func (w *walkState) add(s *state, n int32, j int32, a int32, t placement.Task) bool {
	node := &s.cluster.Nodes[n]
	w.touch(s, n, t)
	if list := w.victims[n]; len(list) == 0 || list[len(list)-1] != j {
		w.victims[n] = append(list, j)
	}
	if k := s.shrinkOf(a); k >= 0 && k != j && slices.Contains(w.victims[n], k) {
		// Freed already with its shrink unit.
		return w.open[n] >= int32(t.GPUCount) && w.cpu[n] >= t.CPUMilli && w.mem[n] >= t.MemoryMiB
	}
	al := s.allocs.get(a)
	w.cpu[n] += al.cpu
	w.mem[n] += al.mem
	amount := cluster.Shares(al.perGPU)
	base := s.index.GPUOffset[n]
	for _, g := range s.allocs.gpusOf(al) {
		k := base + g
		if w.gpuStamp[k] != w.stamp {
			w.gpuStamp[k], w.freed[k] = w.stamp, 0
		}
		before := node.GPUs[g].Free + cluster.Shares(w.freed[k])
		w.freed[k] += int32(amount)
		if before < t.Shares && before+amount >= t.Shares && t.MayUse(node.GPUs[g].Model, node.GPUs[g].Mode) {
			w.open[n]++
		}
	}
	return w.open[n] >= int32(t.GPUCount) && w.cpu[n] >= t.CPUMilli && w.mem[n] >= t.MemoryMiB
}

// putBack drops, from the last but one back to the first, every victim
// without which t still fits (and, for a reclaim, every victim still keeps
// its project's floor: see keepsFloor).
func (s *state) putBack(n int, t placement.Task, victims []int32, vs *victimSearch) []int32 {
	kept := append([]int32(nil), victims...)
	for i := len(kept) - 2; i >= 0; i-- {
		without := append(append([]int32(nil), kept[:i]...), kept[i+1:]...)
		if s.enough(n, t, without, vs.mustFree) && (!vs.comeback || s.floorsKept(without, vs)) {
			kept = without
		}
	}
	return kept
}

// floorsKept reports whether every victim of the set keeps its project's
// floor with the others gone (see keepsFloor).
func (s *state) floorsKept(victims []int32, vs *victimSearch) bool {
	for _, j := range victims {
		job := &s.jobs[j]
		ps := &s.projects[job.project]
		left, groupLeft := ps.held-s.setFreed(job.project, victims), ps.group.held-s.groupFreed(ps.group, victims)
		if !s.keepsFloor(j, left, groupLeft, victims, vs) {
			return false
		}
	}
	return true
}

// enough reports whether t fits on node n once the victims' allocations
// there are gone, and whether the victims free at least mustFree in all.
func (s *state) enough(n int, t placement.Task, victims []int32, mustFree cluster.Shares) bool {
	var freed cluster.Shares
	node := &s.cluster.Nodes[n]
	cpu, mem := node.FreeCPUMilli, node.FreeMemoryMiB
	var buf [16]cluster.Shares
	free := buf[:0]
	for _, g := range node.GPUs {
		free = append(free, g.Free)
	}
	for _, j := range victims {
		if s.covered(j, victims) {
			continue
		}
		freed += s.jobs[j].held
		for _, a := range s.jobs[j].allocs {
			al := s.allocs.get(a)
			if int(al.node) != n || al.gone {
				continue
			}
			cpu += al.cpu
			mem += al.mem
			for _, g := range s.allocs.gpusOf(al) {
				free[g] += cluster.Shares(al.perGPU)
			}
		}
	}
	if freed < mustFree || cpu < t.CPUMilli || mem < t.MemoryMiB {
		return false
	}
	found := 0
	for g := range free {
		if free[g] >= t.Shares && t.MayUse(node.GPUs[g].Model, node.GPUs[g].Mode) {
			found++
		}
	}
	return found >= t.GPUCount
}

// covered reports whether victim j frees nothing beyond the other victims:
// a shrink unit whose job is among them (suspending the job stops the
// instance too).
func (s *state) covered(j int32, victims []int32) bool {
	job := &s.jobs[j]
	return job.shrink && slices.Contains(victims, job.parent)
}

// setFreed is what the victims free of project p's usage, each allocation
// counted once.
func (s *state) setFreed(p int32, victims []int32) cluster.Shares {
	var freed cluster.Shares
	for _, k := range victims {
		if s.jobs[k].project == p && !s.covered(k, victims) {
			freed += s.jobs[k].held
		}
	}
	return freed
}

// groupFreed is what the victims free of group g's usage, each allocation
// counted once.
func (s *state) groupFreed(g *groupState, victims []int32) cluster.Shares {
	var freed cluster.Shares
	for _, k := range victims {
		if s.projects[s.jobs[k].project].group == g && !s.covered(k, victims) {
			freed += s.jobs[k].held
		}
	}
	return freed
}

// freedBy is what victim j frees of its project's usage on top of the
// victims taken: nothing for a shrink unit whose job is taken, its usage
// less that of its shrink units taken for a job, else its usage.
func (s *state) freedBy(j int32, taken []int32) cluster.Shares {
	job := &s.jobs[j]
	if !s.shrinking {
		return job.held
	}
	if s.covered(j, taken) {
		return 0
	}
	freed := job.held
	for _, k := range s.unitsOf[j] {
		if slices.Contains(taken, k) {
			freed -= s.jobs[k].held
		}
	}
	return freed
}

// uncovered drops the shrink units whose job is also a victim: the job's
// suspension stops them.
func (s *state) uncovered(victims []int32) []int32 {
	if !s.shrinking {
		return victims
	}
	kept := victims[:0:0]
	for _, j := range victims {
		if !s.covered(j, victims) {
			kept = append(kept, j)
		}
	}
	return kept
}
