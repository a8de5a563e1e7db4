package plan

import (
	"fmt"
	"slices"
)

// A gang is a job whose GPU task groups run all together or not at all
// (cluster.Pending.Gang, docs/design.md, Gangs and elastic groups). Its
// pending groups are one unit (see units): placed together, with the
// victims that make room for all of them, or not at all. Nomad places the
// allocations of a job one by one, so a gang may run in part: some
// allocations run while the rest waits. Such a partial gang holds its GPUs
// idle, and two of them can each hold what the other needs. The plan
// therefore either completes a partial gang (its waiting unit is placed,
// in fairness order, like any unit) or makes it wait whole: its running
// part is suspended and the whole job comes back as one suspended unit
// when all of it fits. Between partial gangs, the one earlier in fairness
// order wins: when its unit does not fit, the partial gangs still waiting
// for their turn give way, latest in fairness order first, until it fits
// (completeGang); a gang that does not fit even then waits whole itself.

// GangWait is a gang that ran in part and that the plan suspends whole
// until all of it fits: the Suspend action of its job carries the same
// reason.
type GangWait struct {
	Project, Job string
	// Workload is the position in Snapshot.Pending of the first workload
	// of the gang's waiting part.
	Workload int
	Reason   string
}

// GangReason starts the reason of every suspension that makes a gang wait
// whole.
const GangReason = "waiting for the whole gang"

// gangs is what the plan knows of the gangs that run in part.
type gangs struct {
	// partial lists the partial gangs by the lead of their waiting
	// unit; job is each one's running job, by lead, and lead the
	// reverse.
	partial   []int32
	job, lead map[int32]int32
	// waiting records the reason each partial gang waits whole, by
	// job, for Result.GangsWaiting.
	waiting map[int32]string
}

// findPartialGangs lists the gangs that run in part: a running job, never
// a system job nor one that may never be a victim (it cannot be suspended),
// holding GPUs, with a pending gang unit.
func (s *state) findPartialGangs() {
	s.gangs = gangs{job: map[int32]int32{}, lead: map[int32]int32{}, waiting: map[int32]string{}}
	for w := range s.snap.Pending {
		wl := &s.snap.Pending[w]
		if !wl.Gang || wl.Shrunk || s.units.lead[w] != int32(w) {
			continue
		}
		j, ok := s.jobByKey[wl.Job]
		if !ok {
			continue
		}
		if job := &s.jobs[j]; job.system || job.neverVictim != "" || job.held == 0 {
			continue
		}
		s.gangs.partial = append(s.gangs.partial, int32(w))
		s.gangs.job[int32(w)] = j
		s.gangs.lead[j] = int32(w)
	}
}

// partialGang returns the running job of the partial gang whose waiting
// unit w leads, or -1.
func (s *state) partialGang(w int) int32 {
	if j, ok := s.gangs.job[int32(w)]; ok {
		return j
	}
	return -1
}

// waitUnplaceableGangs makes every partial gang whose waiting part fits
// nowhere (see findUnplaceable) wait whole: it could never complete.
func (s *state) waitUnplaceableGangs() {
	for _, u := range s.plan.unplaceable {
		if s.partialGang(u.Workload) >= 0 {
			s.waitWhole(u.Workload, "its waiting part is unplaceable: "+u.Reason)
		}
	}
}

// waitWhole suspends the running part of the partial gang whose waiting
// unit w leads, for no workload (Action.Workload -1): it comes back whole.
func (s *state) waitWhole(w int, why string) {
	j := s.gangs.job[int32(w)]
	if s.jobs[j].suspended {
		return
	}
	reason := fmt.Sprintf("%s: %s", GangReason, why)
	s.release(j)
	s.plan.actions = append(s.plan.actions, s.suspendAction(j, -1, CauseGang, reason))
	s.gangs.waiting[j] = reason
}

// completeGang places the unit of the partial gang being tried once the
// partial gangs still waiting for their turn give way: the latest in
// fairness order first, one more on each try, until the unit fits. Each
// try starts afresh (a failed one is rolled back); the gangs that gave way
// for the successful one are suspended for it and wait whole. It reports
// whether the unit was placed.
func (s *state) completeGang(a *attempt) (bool, error) {
	later := s.laterGangs(a.lead)
	reason := fmt.Sprintf("%s: its GPUs go to gang %s, earlier in fairness order, which completes with them",
		GangReason, s.snap.Pending[a.lead].Job)
	for k := 1; k <= len(later); k++ {
		s.startAttempt(a.lead, a.p)
		for _, g := range later[:k] {
			s.suspend(a, s.gangs.job[g], CauseGang, reason)
		}
		s.entitle(a)
		placed, _, err := s.placeUnit(a)
		if err != nil {
			return false, err
		}
		if placed {
			for _, g := range later[:k] {
				s.gangs.waiting[s.gangs.job[g]] = reason
			}
			return true, nil
		}
	}
	return false, nil
}

// laterGangs lists the partial gangs other than lead's whose unit still
// waits for its turn in the walk and whose running part runs, latest in
// fairness order first: by their projects' order (compareFairness), then
// their project's queue order.
func (s *state) laterGangs(lead int) []int32 {
	var later []int32
	for _, g := range s.gangs.partial {
		if int(g) != lead && s.plan.queued[g] && !s.jobs[s.gangs.job[g]].suspended {
			later = append(later, g)
		}
	}
	slices.SortFunc(later, func(x, y int32) int {
		px, py := int(s.index.PendingProject[x]), int(s.index.PendingProject[y])
		if px != py {
			return -s.compareFairness(px, py)
		}
		return -s.compareQueued(x, y)
	})
	return later
}

// gangsWaiting is Result.GangsWaiting: every partial gang whose running
// part the plan suspends, in the order of their waiting units.
func (s *state) gangsWaiting() []GangWait {
	var out []GangWait
	for _, g := range s.gangs.partial {
		j := s.gangs.job[g]
		if !s.jobs[j].suspended {
			continue
		}
		reason, ok := s.gangs.waiting[j]
		if !ok {
			reason = GangReason + ": its running part is suspended in this plan"
		}
		out = append(out, GangWait{Project: s.snap.Pending[g].Project, Job: s.jobs[j].name, Workload: int(g), Reason: reason})
	}
	return out
}
