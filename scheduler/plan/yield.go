package plan

import (
	"cmp"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// A reservation gives way to work the next cycle tries first. It holds
// room for a suspended job only until the next cycle, which tries pending
// work in its own fairness order: computed from the usages this plan
// leaves, without the reservations, and not the order this walk happened
// to try things in (the plan changes usages as it goes). Room held for a
// job the next cycle tries after some workload goes to that workload
// there; the reserved job then comes back by taking work this plan
// starts, which is churn. So when a workload (or another reservation)
// fails, and rooms are held for jobs the next cycle tries after it, it is
// tried once more with those rooms released. If it places, the released
// reservations are tried again later in the walk (they may fence, taking
// back work placed in this cycle); if it fails anyway, the rollback holds
// the rooms again.

// hold is one piece of room a reservation holds on node (-1: none, a
// mark): release gives it back and retake holds it again (only ever right
// after a release was undone).
type hold struct {
	node            int
	release, retake func()
}

// heldRoom is the room a successful reservation holds for job: amount
// GPUs, in holds.
type heldRoom struct {
	job      int32
	amount   cluster.Shares
	holds    []hold
	released bool
}

// keepRoom records the room reserved by attempt a for job j.
func (s *state) keepRoom(j int32, a *attempt) {
	s.plan.rooms = append(s.plan.rooms, heldRoom{job: j, amount: a.total, holds: slices.Clone(a.holds)})
}

// yieldRooms releases, as part of attempt a, the rooms held for jobs the
// next cycle tries after a's work, where the attempt's instance would fit
// once they are released. It reports whether it released any; the
// attempt's entitlements then count its project without them.
func (s *state) yieldRooms(a *attempt) bool {
	yielded := false
	for i := range s.plan.rooms {
		if r := &s.plan.rooms[i]; !r.released && s.nextCycleKeeps(a, r) && s.fitsReleased(a, r) {
			s.releaseRoom(a, i)
			yielded = true
		}
	}
	if yielded {
		s.entitle(a)
	}
	return yielded
}

// releaseRoom releases room i within attempt a and queues its job's
// reservation to be tried again.
func (s *state) releaseRoom(a *attempt, i int) {
	r := &s.plan.rooms[i]
	for k := len(r.holds) - 1; k >= 0; k-- {
		r.holds[k].release()
	}
	r.released = true
	delete(s.plan.reservations, r.job)
	s.plan.changes++
	a.undo = append(a.undo, func() {
		r := &s.plan.rooms[i]
		for _, h := range r.holds {
			h.retake()
		}
		r.released = false
		s.plan.reservations[r.job] = -1
		// Held again, the plan is as it was: what failed before the
		// release need not be tried again for it.
		s.plan.changes--
	})
}

// fitsReleased reports whether attempt a's instance fits, on a node it may
// use, on a node of room r once r is released. It releases and retakes
// the room, and leaves the plan as it was.
func (s *state) fitsReleased(a *attempt, r *heldRoom) bool {
	releases := s.cluster.releases
	for k := len(r.holds) - 1; k >= 0; k-- {
		r.holds[k].release()
	}
	fits := false
	for _, h := range r.holds {
		if h.node >= 0 && a.nodes.has(h.node) {
			if _, ok := s.cluster.Fits(h.node, a.task); ok {
				fits = true
				break
			}
		}
	}
	for _, h := range r.holds {
		h.retake()
	}
	s.cluster.releases = releases
	return fits
}

// nextCycleKeeps reports whether the next cycle would give attempt a's
// work the room r holds, and leave it there: in r's project, when the
// queue orders a's work first (an equal priority may not preempt); across
// projects, when the fairness order tries a's work first at the usages
// the two projects will have by then (see usageAtTurn), and r's job may
// not take the room back by reclaim (see reclaimable).
func (s *state) nextCycleKeeps(a *attempt, r *heldRoom) bool {
	entry := int32(a.lead)
	if a.reserve {
		entry = reservationEntry(a.exclude)
	}
	p := int(s.jobs[r.job].project)
	if a.p == p {
		return s.compareQueued(entry, reservationEntry(r.job)) < 0
	}
	pa, pr := &s.projects[a.p], &s.projects[p]
	ha, hr := s.usageAtTurn(a.p, entry), s.usageAtTurn(p, reservationEntry(r.job))
	c := compareStanding(pa, pr, ha, hr)
	if c == 0 {
		c = cmp.Compare(pr.priority, pa.priority)
	}
	return c < 0 && !reclaimable(pr, hr+r.amount, pa, ha+a.total)
}

// usageAtTurn is what project p will hold in the next cycle when its
// queue entry e is tried: what it holds without reservations, and the
// rooms held for its jobs that its queue orders before e (they come back
// first).
func (s *state) usageAtTurn(p int, e int32) cluster.Shares {
	ps := &s.projects[p]
	held := ps.held - ps.reserved
	for i := range s.plan.rooms {
		r := &s.plan.rooms[i]
		if !r.released && int(s.jobs[r.job].project) == p && s.compareQueued(reservationEntry(r.job), e) < 0 {
			held += r.amount
		}
	}
	return held
}

// reclaimable reports whether a project holding taker once it takes may
// reclaim from one holding victim: the first within its guarantee and the
// other above its own, or the same of deserved shares.
func reclaimable(takerProject *projectState, taker cluster.Shares, victimProject *projectState, victim cluster.Shares) bool {
	return taker <= takerProject.guaranteed && victim > victimProject.guaranteed ||
		taker <= takerProject.deserved && victim > victimProject.deserved
}

// compareStanding orders projects pa and pb, holding ha and hb, by their
// fairness standing (see compareFairness).
func compareStanding(pa, pb *projectState, ha, hb cluster.Shares) int {
	ca, cb := pa.fairnessClass(ha), pb.fairnessClass(hb)
	if ca != cb {
		return cmp.Compare(ca, cb)
	}
	switch ca {
	case 0:
		return cmp.Compare(ha*pb.guaranteed, hb*pa.guaranteed)
	case 1:
		return cmp.Compare(ha*pb.deserved, hb*pa.deserved)
	}
	return cmp.Compare(ha-pa.deserved, hb-pb.deserved)
}
