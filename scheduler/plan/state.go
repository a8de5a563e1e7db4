package plan

import (
	"cmp"
	"math"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/fairshare"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// state is one planning cycle in progress.
type state struct {
	// snap is the snapshot planned on and index its lookup tables; both
	// are read-only.
	snap  *cluster.Snapshot
	index *cluster.Index
	// projects are the projects' quota numbers, in Snapshot.Projects
	// order, as the plan so far leaves them; groups are their departments
	// and, for each project on its own, a group of that one project (see
	// groupState).
	projects []projectState
	groups   []groupState
	// cluster is the capacity being placed on (see clusterState).
	cluster clusterState
	// jobs are the jobs that may be suspended: the running ones and, as
	// the next cycle will see it, the work placed in this cycle (see
	// registerPlanned); jobByKey finds them by name, and allocs holds
	// their allocations.
	jobs     []jobState
	jobByKey map[string]int32
	allocs   allocTable
	// units groups the pending workloads placed together (see unitOf);
	// gangs are the gangs that run in part (see findPartialGangs).
	units units
	gangs gangs
	// plan is the plan built so far.
	plan planProgress
	// attempt is the workload being tried.
	attempt attempt
	// movable lists the jobs that may be moved, and maxMoves bounds the
	// moves (Options.MaxMoves; see consolidate).
	movable  []int32
	maxMoves int
	// broken is a broken invariant found where no error can be
	// returned (see hold); run returns it.
	broken error
	// walk is findVictims' scratch space, reused from one search to the
	// next.
	walk walkState
	// shrinking says that some elastic group runs above its minimum;
	// allocShrink is then, per running allocation, its shrink unit or -1,
	// shrinkUnits what each unit stops and unitsOf each job's units (see
	// listShrinks). growing marks the walk of growth (see grow).
	shrinking   bool
	allocShrink []int32
	shrinkUnits map[int32]shrinkUnit
	unitsOf     map[int32][]int32
	growing     bool
}

// projectState is a project's quota numbers during the walk.
type projectState struct {
	guaranteed, deserved, demand, cap cluster.Shares
	held, nonPreemptible              cluster.Shares
	// reserved is the part of usage held for its jobs this plan suspends
	// (see reserveFor).
	reserved cluster.Shares
	priority int
	// group is the project's department, or its own group when it has
	// none.
	group *groupState
	// jobs are the project's suspendable jobs in victim order; planned
	// the part of them placed in this cycle (a reservation's only
	// victims, see reserveFor).
	jobs, planned []int32
	// exposed are its non-preemptible jobs that run above its guarantee
	// and count as preemptible (see listVictims).
	exposed []string
	// neverVictims are "job: reason" for its jobs marked never to be a
	// victim (see listVictims).
	neverVictims []string
	// suspended are its running jobs this plan suspends, in order (see
	// reserveFor).
	suspended []int32
	// shrinks are its shrink units in victim order (see listShrinks).
	shrinks []int32
	// queue is the project's pending units (by their lead workload) and
	// reservations (see reservationEntry) in the order they are tried.
	queue []int32
}

// groupState is a department's quota numbers during the walk, or those of
// a project on its own, which stands beside the departments as a group of
// one with its own settings (docs/design.md, Departments). Its usage is
// its projects' together: every change of a project's usage goes through
// projectState.addHeld.
type groupState struct {
	guaranteed, deserved, cap, held cluster.Shares
	priority                        int
	// department marks a department (not a project on its own); members
	// are its projects' positions.
	department bool
	members    []int32
}

// addHeld changes the project's usage, and its group's, by d.
func (p *projectState) addHeld(d cluster.Shares) {
	p.held += d
	p.group.held += d
}

// overDeserved is how far the group is above its deserved share
// (negative when below).
func (g *groupState) overDeserved() cluster.Shares { return g.held - g.deserved }

// jobState is a job that may be suspended: every allocation of one job.
type jobState struct {
	name     string
	project  int32
	priority int
	// nonPreemptible marks a job that opted out of suspension; exposed,
	// one that runs above its project's guarantee all the same and is a
	// victim like preemptible work (see listVictims). A system job is
	// never a victim.
	nonPreemptible, exposed bool
	system                  bool
	// neverVictim, when set, says why the job is never a victim
	// (cluster.Allocation.NeverVictim).
	neverVictim string
	suspended   bool
	// newest is the latest start among its allocations.
	newest int64
	held   cluster.Shares
	// allocs are its positions in state.allocs.
	allocs []int32
	// planned marks work placed in this cycle (see registerPlanned).
	planned bool
	// queued marks a job suspended in this plan whose reservation is in
	// its project's queue (see reserveFor).
	queued bool
	// shrink marks a shrink unit: one instance of parent's elastic group
	// above its minimum (see listShrinks), rank its place among the
	// parent's units, newest first; byParent marks a unit stopped because
	// its parent was suspended whole. The group and allocation ID are in
	// state.shrinkUnits.
	shrink, byParent bool
	parent, rank     int32
	// young marks a job all of whose allocations are within their
	// minimum runtime (cluster.Allocation.InMinRuntime); youngAllocs
	// counts those that are, while the job is listed.
	young       bool
	youngAllocs int
	// fenced marks running work a reservation counts on taking in the
	// next cycle (see fence): no other search of this plan takes it.
	fenced bool
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
	// onNode lists, per node, the allocations on it (for findVictims'
	// second step); an allocation whose job no longer holds it (a job
	// placed in this cycle, taken back and placed again) stays listed and
	// is skipped.
	onNode [][]int32
}

// allocInfo is what one allocation holds: its job and node, CPU, memory,
// and on each of its GPUs perGPU shares; its gpuN GPU
// indexes start at allocTable.gpus[gpuOff]. What it holds on an
// unavailable node or GPU is left out: suspending it frees nothing there.
type allocInfo struct {
	cpu, mem     int64
	job          int32
	node         int32
	perGPU       int32
	gpuOff, gpuN int32
	// gone marks an allocation shrunk away in this plan: its job no
	// longer holds it (see shrink).
	gone bool
}

// get returns allocation a.
func (t *allocTable) get(a int32) *allocInfo { return &t.infos[a] }

// gpusOf returns the GPU indexes of al on its node.
func (t *allocTable) gpusOf(al *allocInfo) []int32 {
	return t.gpus[al.gpuOff : al.gpuOff+al.gpuN]
}

// add records an allocation of job on node n (running, or placed in this
// cycle) and returns its position.
func (t *allocTable) add(job int32, n int, node *cluster.Node, ask *cluster.Ask, gpus []int) int32 {
	off := int32(len(t.gpus))
	info := allocInfo{job: job, node: int32(n), perGPU: int32(perGPU(ask)), gpuOff: off}
	if node.Unavailable == "" {
		info.cpu, info.mem = ask.CPUMilli, ask.MemoryMiB
		for _, g := range gpus {
			if g >= 0 && g < len(node.GPUs) && node.GPUs[g].Unavailable == "" {
				t.gpus = append(t.gpus, int32(g))
			}
		}
	}
	info.gpuN = int32(len(t.gpus)) - off
	t.infos = append(t.infos, info)
	a := int32(len(t.infos) - 1)
	t.onNode[n] = append(t.onNode[n], a)
	return a
}

// planProgress is the plan built so far, and what the walk of the pending
// workloads keeps about it.
type planProgress struct {
	actions []Action
	// cancelled marks the Place actions of work taken back; they are left
	// out of the result.
	cancelled map[int32]bool
	unplaced  []Unplaced
	// unplaceable lists the workloads that fit nowhere (see
	// findUnplaceable); never marks them.
	unplaceable []Unplaced
	never       []bool
	// placed says which workloads are placed; placements counts them.
	placed     []bool
	placements int
	// queued marks the units in a project's queue.
	queued []bool
	// takenBack lists the workloads taken back since the last walk;
	// heldOver marks those a fence took back, which wait for the next
	// cycle (see holdOver).
	takenBack []int32
	heldOver  []bool
	// planned is, per job placed in this cycle, what it consists of.
	planned map[int32]*plannedJob
	// changes counts placements and releases; failedAt records, per
	// workload, the count when it last failed.
	changes  int
	failedAt []int
	// reservations records, per job this plan suspends, -1 once room is
	// reserved for it, else the change count when a reservation last
	// failed (see reserveFor).
	reservations map[int32]int
	// rooms are the successful reservations' rooms, in the order they
	// were reserved (see yieldRooms).
	rooms []heldRoom
	// moves counts the movable jobs moved (see consolidate);
	// consolidateFailed records, per task shape, the change count when
	// consolidation last failed for it.
	moves             int
	consolidateFailed map[shapeKey]int
	// grow lists the elastic groups that grow back (see grow).
	grow []Growth
	// guards are the suspensions that hold queued work from the rooms
	// the plan makes (see guardRooms); they come first in the result.
	guards []Action
}

// plannedJob is what a job placed in this cycle consists of: the workloads
// placed and their Place actions.
type plannedJob struct {
	workloads []int32
	actions   []int32
}

func newPlanProgress(pending int) planProgress {
	return planProgress{
		cancelled:         map[int32]bool{},
		planned:           map[int32]*plannedJob{},
		reservations:      map[int32]int{},
		consolidateFailed: map[shapeKey]int{},
		placed:            make([]bool, pending),
		queued:            make([]bool, pending),
		heldOver:          make([]bool, pending),
		failedAt:          make([]int, pending),
	}
}

// attempt is the unit of workloads being tried (see unitOf): what it asks
// and may do, its placements so far, and how to undo them.
type attempt struct {
	// lead is the unit's first workload, p its project, unit every
	// workload of it, total their GPU amount.
	lead, p int
	unit    []int32
	total   cluster.Shares
	// exclude is the unit's own job, never its victim (-1 if none).
	exclude int32
	// withinGuarantee and withinDeserved say whether the project stays
	// within its guarantee or deserved share once the unit runs;
	// groupWithinGuarantee and groupWithinDeserved the same of its
	// department (of the project itself when it has none).
	withinGuarantee, withinDeserved           bool
	groupWithinGuarantee, groupWithinDeserved bool
	// resume prefixes the reasons of a suspended job's placements.
	resume string
	// reserve marks a reservation (see reserveFor): its
	// placements hold capacity but make no action, and its victims may
	// only be work placed in this cycle.
	reserve bool
	// holds is the room a reservation holds so far.
	holds []hold
	// w is the workload being placed and wl its record; task is one
	// instance as placement sees it, inst its GPU amount, nodes the
	// nodes it may run on.
	w     int
	wl    *cluster.Pending
	task  placement.Task
	inst  cluster.Shares
	nodes nodeSet
	// firstAction is where the unit's actions start in plan.actions;
	// undo reverts its changes (see rollback).
	firstAction int
	undo        []func()
	// instances are its placements so far.
	instances []instance
}

// instance is one placement of a workload of the unit being tried.
type instance struct {
	w      int32
	node   int32
	gpus   []int
	action int32
}

// newState is the start of a plan of snap: its running jobs from
// newRunningJobs, which the state takes over.
func newState(snap *cluster.Snapshot, opts Options) (*state, error) {
	x, err := snap.Index()
	if err != nil {
		return nil, err
	}
	return newStateOn(snap, x, newRunningJobs(snap, x), opts), nil
}

// newStateOn is the start of a plan of snap, indexed by x, with run its
// running jobs (the state changes them).
func newStateOn(snap *cluster.Snapshot, x *cluster.Index, run runningJobs, opts Options) *state {
	s := &state{
		snap:     snap,
		index:    x,
		cluster:  newClusterState(snap, x, opts),
		jobByKey: run.byKey,
		jobs:     run.jobs,
		allocs:   run.allocs,
		units:    newUnits(snap),
		plan:     newPlanProgress(len(snap.Pending)),
		maxMoves: opts.MaxMoves,
	}
	s.findUnplaceable()
	s.projects, s.groups = newProjects(snap, x, s.plan.never)
	s.listMovable()
	s.listVictims()
	s.listShrinks()
	s.findPartialGangs()
	return s
}

// newProjects is every project's quota numbers before the plan, with its
// deserved share for the cycle, and the groups they form (see
// groupState); the workloads never marks are no demand.
func newProjects(snap *cluster.Snapshot, x *cluster.Index, never []bool) ([]projectState, []groupState) {
	d := demand(snap, x, never)
	deserved := fairshare.DeservedNested(x.Capacity, snap.Projects, snap.Departments, x.ProjectDepartment, d)
	projects := make([]projectState, len(snap.Projects))
	for i := range snap.Projects {
		p := &snap.Projects[i]
		projects[i] = projectState{
			guaranteed:     p.Guaranteed,
			deserved:       deserved[i],
			demand:         d[i],
			cap:            p.Cap(),
			held:           x.Held[i],
			nonPreemptible: x.NonPreemptibleHeld[i],
			priority:       p.Priority,
		}
	}
	return projects, newGroups(snap, x, projects)
}

// newGroups forms the groups of the projects: the departments, then one
// group per project on its own; each project points to its group.
func newGroups(snap *cluster.Snapshot, x *cluster.Index, projects []projectState) []groupState {
	alone := 0
	for _, d := range x.ProjectDepartment {
		if d < 0 {
			alone++
		}
	}
	groups := make([]groupState, len(snap.Departments), len(snap.Departments)+alone)
	for i := range snap.Departments {
		d := &snap.Departments[i]
		groups[i] = groupState{guaranteed: d.Guaranteed, cap: d.Cap(), priority: d.Priority, department: true}
	}
	for i := range projects {
		ps := &projects[i]
		g := int(x.ProjectDepartment[i])
		if g < 0 {
			g = len(groups)
			groups = append(groups, groupState{guaranteed: ps.guaranteed, cap: ps.cap, priority: ps.priority})
		}
		gs := &groups[g]
		gs.members = append(gs.members, int32(i))
		gs.deserved += ps.deserved
		gs.held += ps.held
	}
	for i := range projects {
		g := x.ProjectDepartment[i]
		if g < 0 {
			continue
		}
		projects[i].group = &groups[g]
	}
	for g := len(snap.Departments); g < len(groups); g++ {
		projects[groups[g].members[0]].group = &groups[g]
	}
	return groups
}

// listVictims puts every job that may be suspended and holds GPUs on its
// project's list of victims, in victim order. System jobs are never
// victims, nor jobs marked never to be one (named, with the reason, in
// their project's neverVictims). A project's non-preemptible jobs are protected, oldest first,
// as long as together they stay within its guarantee; the newer ones
// (work Nomad placed by itself above the guarantee) are exposed: victims
// like preemptible work (docs/design.md, Reclaim and preempt).
func (s *state) listVictims() {
	optedOut := make([][]int32, len(s.projects))
	for j := range s.jobs {
		job := &s.jobs[j]
		switch {
		case job.system || job.held == 0:
		case job.neverVictim != "":
			p := &s.projects[job.project]
			p.neverVictims = append(p.neverVictims, job.name+": "+job.neverVictim)
		case job.nonPreemptible:
			optedOut[job.project] = append(optedOut[job.project], int32(j))
		default:
			p := &s.projects[job.project]
			p.jobs = append(p.jobs, int32(j))
		}
	}
	for i := range s.projects {
		p := &s.projects[i]
		s.expose(p, optedOut[i])
		slices.SortFunc(p.jobs, s.compareJobs)
	}
}

// expose protects the project's non-preemptible jobs oldest first while
// they stay within its guarantee and adds the rest to its victims.
func (s *state) expose(p *projectState, jobs []int32) {
	slices.SortFunc(jobs, func(a, b int32) int {
		ja, jb := &s.jobs[a], &s.jobs[b]
		if c := cmp.Compare(ja.newest, jb.newest); c != 0 {
			return c
		}
		return cmp.Compare(ja.name, jb.name)
	})
	var protected cluster.Shares
	for k, j := range jobs {
		if protected+s.jobs[j].held > p.guaranteed {
			for _, j := range jobs[k:] {
				s.jobs[j].exposed = true
				p.jobs = append(p.jobs, j)
				p.exposed = append(p.exposed, s.jobs[j].name)
			}
			return
		}
		protected += s.jobs[j].held
	}
}

// compareQueued orders one project's queue: higher priority, then earlier
// submit, then job and group name. A reservation (see reserveFor) is
// ordered as its job will be in the next cycle: submitted at its oldest
// start.
func (s *state) compareQueued(a, b int32) int {
	ka, kb := s.queueKey(a), s.queueKey(b)
	if c := cmp.Compare(kb.priority, ka.priority); c != 0 {
		return c
	}
	if c := cmp.Compare(ka.submit, kb.submit); c != 0 {
		return c
	}
	if c := cmp.Compare(ka.job, kb.job); c != 0 {
		return c
	}
	return cmp.Compare(ka.group, kb.group)
}

// queueKey is what compareQueued reads of a queue entry.
type queueKey struct {
	priority   int
	submit     int64
	job, group string
}

func (s *state) queueKey(e int32) queueKey {
	if e >= 0 {
		w := &s.snap.Pending[e]
		return queueKey{w.Priority, w.Submit, w.Job, w.Group}
	}
	job := &s.jobs[reservationJob(e)]
	oldest := job.newest
	for _, al := range job.allocs {
		oldest = min(oldest, s.snap.Allocations[al].Start)
	}
	return queueKey{job.priority, oldest, job.name, ""}
}
