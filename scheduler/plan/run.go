package plan

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// run holds every project to its limit, then walks the pending workloads
// in fairness order, then walks again the ones left waiting (and those
// whose placement a later workload took back), with a reservation for
// every job suspended so far (see reserveFor), for as long as a walk
// places or reserves something. Work placed in this cycle is a victim like running work (see
// registerPlanned), so a workload that could only fit once later work was
// placed is placed now instead of reclaiming that work in the next cycle:
// a plan never starts work that the next plan, with nothing else changed,
// would suspend.
func (s *state) run() error {
	s.cluster.initSummaries()
	s.holdToLimits()
	s.waitUnplaceableGangs()
	for w := range s.snap.Pending {
		if !s.plan.never[w] && !s.snap.Pending[w].Shrunk {
			s.enqueue(w)
		}
	}
	if err := s.walkQueues(); err != nil {
		return err
	}
	// Every successful walk places at least one workload for good, makes
	// one reservation or takes one back; the bound only guards against a
	// bug.
	for range len(s.snap.Pending) + len(s.jobs) + 1 {
		if !s.requeueWaiting() {
			break
		}
		placed := s.plan.placements
		if err := s.walkQueues(); err != nil {
			return err
		}
		if s.plan.placements == placed {
			break
		}
	}
	if s.broken != nil {
		return s.broken
	}
	for _, w := range s.plan.takenBack {
		if !s.plan.placed[w] && s.units.lead[w] == w {
			s.plan.unplaced = append(s.plan.unplaced, Unplaced{int(w), "its placement was taken back in this plan by work entitled to reclaim it"})
		}
	}
	s.guardRooms()
	return s.grow()
}

// enqueue adds the unit of pending workload w to its project's queue,
// unless it is queued already.
func (s *state) enqueue(w int) {
	l := s.units.lead[w]
	if s.plan.queued[l] {
		return
	}
	s.plan.queued[l] = true
	p := &s.projects[s.index.PendingProject[l]]
	p.queue = append(p.queue, l)
}

// requeueWaiting queues again the workloads taken back since the last walk
// and those left waiting that failed before the plan last changed, and a
// reservation for every job suspended so far that has none yet. It reports
// whether it queued any.
func (s *state) requeueWaiting() bool {
	reserving := s.queueReservations()
	again := s.plan.unplaced[:0:0]
	keep := s.plan.unplaced[:0]
	for _, u := range s.plan.unplaced {
		if s.plan.changes == s.plan.failedAt[u.Workload] {
			keep = append(keep, u)
			continue
		}
		again = append(again, u)
	}
	var held []Unplaced
	for _, w := range s.plan.takenBack {
		switch {
		case s.plan.placed[w]:
		case s.plan.heldOver[w]:
			if s.units.lead[w] == w {
				held = append(held, Unplaced{int(w), "its placement was taken back for the room a job suspended in this plan comes back to; it is tried again in the next cycle"})
			}
		default:
			again = append(again, Unplaced{Workload: int(w)})
		}
	}
	s.plan.takenBack = s.plan.takenBack[:0]
	if len(again) == 0 {
		s.plan.unplaced = append(s.plan.unplaced, held...)
		return reserving
	}
	s.plan.unplaced = append(keep, held...)
	for _, u := range again {
		s.enqueue(u.Workload)
	}
	return true
}

// walkQueues tries the queued units, always the next one of the project
// first in fairness order, until every queue is empty.
func (s *state) walkQueues() error {
	for i := range s.projects {
		slices.SortFunc(s.projects[i].queue, s.compareQueued)
	}
	for {
		best := -1
		for p := range s.projects {
			if len(s.projects[p].queue) > 0 && (best < 0 || s.compareFairness(p, best) < 0) {
				best = p
			}
		}
		if best < 0 {
			return nil
		}
		ps := &s.projects[best]
		e := ps.queue[0]
		ps.queue = ps.queue[1:]
		var err error
		switch {
		case e < 0:
			err = s.reserveFor(reservationJob(e))
		case s.growing:
			s.plan.queued[e] = false
			err = s.tryGrow(int(e), best)
		default:
			s.plan.queued[e] = false
			err = s.tryUnit(int(e), best)
		}
		if err != nil {
			return err
		}
	}
}

// fairnessClass is the project's class when it holds held: 0 below its
// guarantee, 1 below its deserved share, 2 otherwise.
func (p *projectState) fairnessClass(held cluster.Shares) int {
	switch {
	case held < p.guaranteed:
		return 0
	case held < p.deserved:
		return 1
	}
	return 2
}

// compareFairness orders projects for the next pending workload: the
// project most below its guarantee (as a fraction of it) first, then the one
// most below its deserved share, then the least over it; then higher project
// priority, then the project's next workload (priority, submit time).
func (s *state) compareFairness(a, b int) int {
	pa, pb := &s.projects[a], &s.projects[b]
	if c := compareStanding(pa, pb, pa.held, pb.held); c != 0 {
		return c
	}
	if c := cmp.Compare(pb.priority, pa.priority); c != 0 {
		return c
	}
	if c := s.compareQueued(pa.queue[0], pb.queue[0]); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}

// tryUnit places every instance of every workload of the unit led by
// pending workload w of project p, or none: a failure undoes the instances
// already planned.
//
// The unit of a gang that runs in part (see completeGang) that does not fit
// even once the partial gangs later in fairness order give way waits
// whole: its running part is suspended (waitWhole).
func (s *state) tryUnit(w, p int) error {
	a := s.startAttempt(w, p)
	s.plan.failedAt[w] = s.plan.changes
	if reason := s.refusal(a); reason != "" {
		s.plan.unplaced = append(s.plan.unplaced, Unplaced{w, reason})
		if s.partialGang(w) >= 0 {
			s.waitWhole(w, reason)
		}
		return nil
	}
	placed, reason, err := s.placeUnit(a)
	if err == nil && !placed && s.partialGang(w) >= 0 {
		placed, err = s.completeGang(a)
	}
	if err != nil {
		return err
	}
	if !placed {
		s.plan.failedAt[w] = s.plan.changes
		s.plan.unplaced = append(s.plan.unplaced, Unplaced{w, reason})
		if s.partialGang(w) >= 0 {
			s.waitWhole(w, reason)
		}
		return nil
	}
	s.plan.placements++
	for _, m := range a.unit {
		s.plan.placed[m] = true
	}
	s.registerPlanned(a)
	return nil
}

// placeUnit places every instance of every workload of the attempt's unit,
// or none: a failure rolls back every change of the attempt and says why.
// A unit that fails is tried once more with the rooms of reservations the
// next cycle tries after it released (see yieldRooms).
func (s *state) placeUnit(a *attempt) (placed bool, reason string, err error) {
	placed, reason, err = s.placeUnitOnce(a)
	if err != nil || placed || !s.yieldRooms(a) {
		return placed, reason, err
	}
	if placed, _, err = s.placeUnitOnce(a); err != nil || placed {
		return placed, "", err
	}
	s.entitle(a)
	return false, reason, nil
}

// placeUnitOnce is one try of placeUnit.
func (s *state) placeUnitOnce(a *attempt) (placed bool, reason string, err error) {
	for _, m := range a.unit {
		s.member(a, int(m))
		for range a.wl.Count {
			placed, overLimit, err := s.placeInstance(a)
			if err != nil {
				return false, "", err
			}
			if !placed {
				s.rollback(a)
				return false, s.failReason(a, overLimit), nil
			}
		}
	}
	return true, "", nil
}

// startAttempt begins trying the unit led by pending workload w of
// project p.
func (s *state) startAttempt(w, p int) *attempt {
	unit := s.units.of(w)
	wl := &s.snap.Pending[w]
	var total cluster.Shares
	for _, m := range unit {
		total += s.snap.Pending[m].GPUShares()
	}
	exclude := int32(-1)
	if j, ok := s.jobByKey[wl.Job]; ok {
		exclude = j
	}
	resume := ""
	if wl.Suspended {
		resume = "resume suspended job; "
	}
	a := &s.attempt
	*a = attempt{
		lead: w, p: p, unit: unit, total: total,
		exclude:     exclude,
		resume:      resume,
		firstAction: len(s.plan.actions),
		undo:        a.undo[:0],
		instances:   a.instances[:0],
	}
	s.entitle(a)
	s.member(a, w)
	return a
}

// entitle sets what the attempt's project and department may reclaim by:
// whether each stays within its guarantee or deserved share once the
// unit's total runs.
func (s *state) entitle(a *attempt) {
	ps := &s.projects[a.p]
	a.withinGuarantee = ps.held+a.total <= ps.guaranteed
	a.withinDeserved = ps.held+a.total <= ps.deserved
	a.groupWithinGuarantee = ps.group.held+a.total <= ps.group.guaranteed
	a.groupWithinDeserved = ps.group.held+a.total <= ps.group.deserved
}

// member makes workload w of the unit the one being placed.
func (s *state) member(a *attempt, w int) {
	a.w, a.wl = w, &s.snap.Pending[w]
	a.task = s.cluster.task(a.wl.Ask)
	a.inst = a.wl.Ask.GPUShares()
	a.nodes = pendingNodes(s.index, w)
}

// refusal says why the unit may not be placed at all in this cycle, or
// returns "".
func (s *state) refusal(a *attempt) string {
	if j := a.exclude; j >= 0 && s.jobs[j].suspended && !s.jobs[j].planned {
		if reason, ok := s.gangs.waiting[j]; ok {
			return reason
		}
		return "its job is suspended in this plan"
	}
	ps := &s.projects[a.p]
	name := s.snap.Projects[a.p].Name
	if !a.wl.Preemptible && ps.nonPreemptible+a.total > ps.guaranteed {
		return fmt.Sprintf("non-preemptible work runs only within the guarantee: project %s guarantees %s, runs %s non-preemptible, asks %s",
			name, ps.guaranteed, ps.nonPreemptible, a.total)
	}
	return ""
}

// placeInstance places one instance of the workload: on idle capacity when
// its project stays within its limit; else, when the project stays within
// its guarantee or deserved share, by reclaiming from other projects; else
// by preempting lower-priority jobs of its own project, which must also
// free what the instance would take above the limit. overLimit reports
// whether the instance would take the project above its limit.
func (s *state) placeInstance(a *attempt) (placed, overLimit bool, err error) {
	over := s.overLimit(a.p, a.inst)
	if over <= 0 {
		if ch, ok := s.cluster.placeIdle(a.task, a.nodes); ok {
			return true, false, s.place(a, ch, a.resume+s.idleReason(a.p, a.inst))
		}
		if ok, err := s.consolidate(a); err != nil || ok {
			return ok, false, err
		}
		if a.withinGuarantee || a.withinDeserved {
			if ok, err := s.reclaim(a); err != nil || ok {
				return ok, false, err
			}
		}
	}
	ok, err := s.preempt(a, max(over, 0))
	return ok, over > 0, err
}

// overLimit is how far project p, and its department, would go above
// their limits with inst more (the larger; 0 or less when within both).
func (s *state) overLimit(p int, inst cluster.Shares) cluster.Shares {
	ps := &s.projects[p]
	return max(ps.held+inst-ps.cap, ps.group.held+inst-ps.group.cap)
}

func (s *state) failReason(a *attempt, overLimit bool) string {
	ps := &s.projects[a.p]
	name := s.snap.Projects[a.p].Name
	total := a.total
	switch {
	case overLimit && ps.held+a.inst <= ps.cap:
		return fmt.Sprintf("department %s of project %s would exceed its limit %s (uses %s, asks %s) and the project has no lower-priority job to preempt",
			s.snap.Projects[a.p].Department, name, ps.group.cap, ps.group.held, total)
	case overLimit:
		return fmt.Sprintf("project %s would exceed its limit %s (uses %s, asks %s) and has no lower-priority job to preempt",
			name, ps.cap, ps.held, total)
	case a.withinGuarantee:
		return fmt.Sprintf("no idle capacity fits, and no set of jobs from over-quota projects or lower-priority jobs of project %s makes it fit", name)
	case a.withinDeserved:
		return fmt.Sprintf("no idle capacity fits, and no set of jobs from projects above their deserved share or lower-priority jobs of project %s makes it fit", name)
	}
	return fmt.Sprintf("no idle capacity fits; project %s would go above its guarantee %s and deserved share %s (uses %s, asks %s), so it may not reclaim",
		name, ps.guaranteed, ps.deserved, ps.held, total)
}

func (s *state) idleReason(p int, inst cluster.Shares) string {
	ps := &s.projects[p]
	after := ps.held + inst
	switch {
	case after <= ps.guaranteed:
		return fmt.Sprintf("fits on idle capacity; project %s within its guarantee (%s of %s)", s.snap.Projects[p].Name, after, ps.guaranteed)
	case after <= ps.deserved:
		return fmt.Sprintf("fits on idle capacity; project %s within its deserved share (%s of %s)", s.snap.Projects[p].Name, after, ps.deserved)
	}
	return fmt.Sprintf("fits on idle capacity; over quota and preemptible (project %s at %s, guarantee %s, deserved %s)",
		s.snap.Projects[p].Name, after, ps.guaranteed, ps.deserved)
}

// reclaim suspends jobs of other projects above their guarantee (or, when
// the workload's project is above its guarantee, above their deserved share)
// to fit one instance: first of the other projects of its department, then
// of other departments (see reclaimSearches).
func (s *state) reclaim(a *attempt) (bool, error) {
	for _, way := range s.reclaimSearches(a) {
		n, victims, ok := s.findVictims(a.task, way.vs)
		if !ok {
			continue
		}
		s.reclaimFrom(a, way, n, victims)
		return true, s.placeOn(a, n, fmt.Sprintf("%sreclaimed %s from %s above their %s; project %s stays within its %s",
			a.resume, s.countVictims(victims), way.from, way.what, s.snap.Projects[a.p].Name, way.what))
	}
	return false, nil
}

// reclaimFrom suspends the victims a reclaim found on node n.
func (s *state) reclaimFrom(a *attempt, way reclaimWay, n int, victims []int32) {
	name := s.snap.Projects[a.p].Name
	for _, j := range victims {
		q := s.jobs[j].project
		s.take(a, j, fmt.Sprintf("reclaim for project %s (within its %s): project %s holds %s, above its %s %s; makes room for %s/%s on %s",
			name, way.what, s.snap.Projects[q].Name, s.projects[q].held, way.what, way.vs.floor(q), a.wl.Job, a.wl.Group, s.cluster.Nodes[n].Name))
	}
}

// reclaimWay is one victim search of reclaim: what floor it keeps
// ("guarantee" or "deserved share") and whom it takes from, for reasons.
type reclaimWay struct {
	vs   victimSearch
	what string
	from string
}

// reclaimSearches are the victim searches of reclaim for attempt a, in
// the order they are tried (docs/design.md, Departments): first the other
// projects of its department, each kept at its floor; then the projects
// of other departments and those on their own, when the attempt's
// department stays within its own guarantee or deserved share, each kept
// at its floor and its department at the department's. The project's
// place decides the projects' floor (guarantee when it stays within its
// guarantee, else deserved share), its department's place the
// departments'. A project on its own is its own department, so for it
// this is one search, both floors the same.
func (s *state) reclaimSearches(a *attempt) []reclaimWay {
	floor := func(q int32) cluster.Shares { return s.projects[q].deserved }
	what := "deserved share"
	if a.withinGuarantee {
		floor = func(q int32) cluster.Shares { return s.projects[q].guaranteed }
		what = "guarantee"
	}
	base := victimSearch{floor: floor, exclude: a.exclude, nodes: a.nodes,
		plannedOnly: a.reserve, comeback: true, minRuntime: !a.withinGuarantee}
	own := s.projects[a.p].group
	var ways []reclaimWay
	if own.department {
		var siblings []int32
		for _, q := range own.members {
			if int(q) != a.p && s.projects[q].held > floor(q) {
				siblings = append(siblings, q)
			}
		}
		if len(siblings) > 0 {
			vs := base
			vs.projects = siblings
			ways = append(ways, reclaimWay{vs: vs, what: what, from: "its department's other projects"})
		}
	}
	var groupFloor func(g *groupState) cluster.Shares
	switch {
	case a.groupWithinGuarantee:
		groupFloor = func(g *groupState) cluster.Shares { return g.guaranteed }
	case a.groupWithinDeserved:
		groupFloor = func(g *groupState) cluster.Shares { return g.deserved }
	default:
		return ways
	}
	var from []int32
	for q := range s.projects {
		ps := &s.projects[q]
		if ps.group != own && ps.held > floor(int32(q)) && ps.group.held > groupFloor(ps.group) {
			from = append(from, int32(q))
		}
	}
	if len(from) > 0 {
		vs := base
		vs.projects, vs.groupFloor = from, groupFloor
		way := reclaimWay{vs: vs, what: what, from: "projects"}
		if own.department {
			way.from = "other departments' projects"
		}
		ways = append(ways, way)
	}
	return ways
}

// preemptSearch is the victim search of preemption inside a's project;
// mustFree is what the victims must free to keep it within its limit.
func (s *state) preemptSearch(a *attempt, mustFree cluster.Shares) victimSearch {
	prio := a.wl.Priority
	own := ownFloor(s.projects[a.p].held, s.projects[a.p].guaranteed, a.inst)
	return victimSearch{
		projects:      []int32{int32(a.p)},
		floor:         func(int32) cluster.Shares { return own },
		belowPriority: &prio,
		exclude:       a.exclude,
		mustFree:      mustFree,
		nodes:         a.nodes,
		plannedOnly:   a.reserve,
		minRuntime:    true,
	}
}

// ownFloor is the least a project holding held, with guarantee g, may be
// left with by preemption inside it that makes room for an instance of
// inst (docs/design.md, Reclaim and preempt): below what it holds, up to
// its guarantee, less the instance; and never by freeing twice the
// instance or more.
func ownFloor(held, g, inst cluster.Shares) cluster.Shares {
	return max(min(min(held, g)-inst, held-2*inst+1), 0)
}

// countVictims says, for reasons, what the victims are: "N job(s)", with
// the elastic instances shrunk among them.
func (s *state) countVictims(victims []int32) string {
	shrunk := 0
	for _, j := range victims {
		if s.jobs[j].shrink {
			shrunk++
		}
	}
	switch shrunk {
	case 0:
		return fmt.Sprintf("%d job(s)", len(victims))
	case len(victims):
		return fmt.Sprintf("%d elastic instance(s)", shrunk)
	}
	return fmt.Sprintf("%d elastic instance(s) and %d job(s)", shrunk, len(victims)-shrunk)
}

// preempt suspends lower-priority jobs of the workload's own project to fit
// one instance; mustFree is what they must free to keep the project within
// its limit.
func (s *state) preempt(a *attempt, mustFree cluster.Shares) (bool, error) {
	prio := a.wl.Priority
	n, victims, ok := s.findVictims(a.task, s.preemptSearch(a, mustFree))
	if !ok {
		return false, nil
	}
	name := s.snap.Projects[a.p].Name
	for _, j := range victims {
		s.take(a, j, fmt.Sprintf("preempt inside project %s: job priority %d below pending %s/%s priority %d; makes room on %s",
			name, s.jobs[j].priority, a.wl.Job, a.wl.Group, prio, s.cluster.Nodes[n].Name))
	}
	if !s.shrinking {
		return true, s.placeOn(a, n, fmt.Sprintf("%spreempted %d lower-priority job(s) of project %s", a.resume, len(victims), name))
	}
	return true, s.placeOn(a, n, fmt.Sprintf("%spreempted %s of lower priority in project %s", a.resume, s.countVictims(victims), name))
}
