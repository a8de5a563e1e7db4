package plan

import (
	"cmp"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// A reservation holds, for a running job this plan suspends, the room it
// would come back to in the next plan, so that no work this plan starts is
// displaced by it there. A suspended job is pending work in the next
// cycle, tried by the same rules: it may take idle capacity, reclaim or
// preempt. Work this plan places there would be suspended in the next
// one, with nothing else changed: wasted starts, and the churn the
// stability property forbids (docs/design.md, Suspension and resumption).
// So each such job is queued once more in this plan, in fairness order
// with the workloads walked again (see requeueWaiting), and tried as a
// reservation: placed by the rules it will meet, but taking back only work
// placed in this cycle (never suspending running work), and holding the
// capacity it gets without placing anything. Next cycle the reservation is
// gone and the job finds its room idle. A reservation that fails is tried
// again once the plan changed.
//
// Where the job will come back only by taking running work (reclaim or
// preemption in the next cycle, by the same victim search), the
// reservation fences instead: on the node that search picks, the idle part
// of the GPUs the job would use is held for the rest of this plan, so that
// no work this plan starts lands where the job will make room (it would be
// suspended with the victims: a wasted start). The running victims are
// left alone: only the next plan, with the job pending, decides on them,
// and no other search of this plan takes them (they are the job's room);
// work placed in this cycle among them is taken back.

// reservationEntry is the queue entry of job j's reservation; queue
// entries of pending units are their lead workloads, >= 0.
func reservationEntry(j int32) int32 { return -j - 1 }

// reservationJob is the job of a reservation's queue entry.
func reservationJob(e int32) int32 { return -e - 1 }

// queueReservations queues a reservation for every job this plan suspends
// that has none and was not tried since the plan last changed. It reports
// whether it queued any.
func (s *state) queueReservations() bool {
	queued := false
	for p := range s.projects {
		ps := &s.projects[p]
		for _, j := range ps.suspended {
			at, tried := s.plan.reservations[j]
			if job := &s.jobs[j]; job.queued || tried && (at < 0 || at == s.plan.changes) {
				continue
			}
			s.jobs[j].queued = true
			ps.queue = append(ps.queue, reservationEntry(j))
			queued = true
		}
	}
	return queued
}

// reserveFor tries the reservation of suspended job j and records the
// outcome; a success counts as a placement of the walk.
func (s *state) reserveFor(j int32) error {
	s.jobs[j].queued = false
	ok, err := s.tryReserve(j)
	if err != nil {
		return err
	}
	s.plan.reservations[j] = s.plan.changes
	if ok {
		s.plan.reservations[j] = -1
		s.plan.placements++
		s.keepRoom(j, &s.attempt)
	}
	return nil
}

// tryReserve tries to reserve room for suspended job j, all of it or
// nothing: for a gang that ran in part (see findPartialGangs), its waiting
// part too, on the nodes that part admits.
func (s *state) tryReserve(j int32) (bool, error) {
	job := &s.jobs[j]
	ps := &s.projects[job.project]
	shapes := s.shapesOf(j)
	var waiting []int32
	if l, ok := s.gangs.lead[j]; ok {
		waiting = s.units.of(int(l))
	}
	total := job.held
	for _, m := range waiting {
		total += s.snap.Pending[m].GPUShares()
	}
	a := &s.attempt
	*a = attempt{
		lead: -1, p: int(job.project), total: total, exclude: j,
		reserve:     true,
		firstAction: len(s.plan.actions),
		undo:        a.undo[:0],
		instances:   a.instances[:0],
		holds:       a.holds[:0],
	}
	s.entitle(a)
	if job.nonPreemptible && ps.nonPreemptible+job.held > ps.guaranteed {
		return false, nil
	}
	ok, err := s.reserveOnce(a, shapes, waiting)
	if err != nil || ok || !s.yieldRooms(a) {
		return ok, err
	}
	if ok, err = s.reserveOnce(a, shapes, waiting); err == nil && !ok {
		s.entitle(a)
	}
	return ok, err
}

// reserveOnce is one try of tryReserve: it holds room for every shape of
// the job and every waiting workload of its gang, or rolls back.
func (s *state) reserveOnce(a *attempt, shapes []cluster.Pending, waiting []int32) (bool, error) {
	a.holds = a.holds[:0]
	for i := range len(shapes) + len(waiting) {
		if i < len(shapes) {
			a.w, a.wl, a.nodes = -1, &shapes[i], everyNode
		} else {
			m := int(waiting[i-len(shapes)])
			a.w, a.wl, a.nodes = -1, &s.snap.Pending[m], pendingNodes(s.index, m)
		}
		a.task, a.inst = s.cluster.task(a.wl.Ask), a.wl.Ask.GPUShares()
		for range a.wl.Count {
			placed, _, err := s.placeInstance(a)
			if err != nil {
				return false, err
			}
			if !placed && !s.fence(a) {
				s.rollback(a)
				return false, nil
			}
		}
	}
	return true, nil
}

// shapesOf is suspended job j as the next cycle will see it: one pending
// workload per task group and ask, counting its allocations (not those
// shrunk away).
func (s *state) shapesOf(j int32) []cluster.Pending {
	job := &s.jobs[j]
	var shapes []cluster.Pending
	for _, al := range job.allocs {
		if s.allocs.get(al).gone {
			continue // shrunk away: it comes back by growth
		}
		a := &s.snap.Allocations[al]
		k := slices.IndexFunc(shapes, func(w cluster.Pending) bool { return w.Group == a.Group && sameAsk(&w.Ask, &a.Ask) })
		if k >= 0 {
			shapes[k].Count++
			continue
		}
		shapes = append(shapes, cluster.Pending{Project: a.Project, Job: a.Job, Group: a.Group, Priority: a.Priority,
			Preemptible: a.Preemptible, Ask: a.Ask, Count: 1, Suspended: true})
	}
	slices.SortStableFunc(shapes, func(x, y cluster.Pending) int { return cmp.Compare(x.Group, y.Group) })
	return shapes
}

// sameAsk reports whether two asks are equal.
func sameAsk(x, y *cluster.Ask) bool {
	return x.CPUMilli == y.CPUMilli && x.MemoryMiB == y.MemoryMiB && x.WholeGPUs == y.WholeGPUs && x.Shares == y.Shares &&
		slices.Equal(x.Models, y.Models)
}

// holdOver marks the workloads of planned job j, which a fence takes
// back, to wait for the next cycle (see requeueWaiting).
func (s *state) holdOver(a *attempt, j int32) {
	for _, w := range s.plan.planned[j].workloads {
		if !s.plan.heldOver[w] {
			s.plan.heldOver[w] = true
			a.undo = append(a.undo, func() { s.plan.heldOver[w] = false })
		}
	}
}

// fence holds, for reservation a's instance that no idle capacity or
// work planned in this cycle makes room for, the idle part of the GPUs it
// would use on the node where the next cycle's reclaim or preemption
// would make room (see the reservation's comment above). It reports
// whether such a node was found; the hold is undone with the attempt.
func (s *state) fence(a *attempt) bool {
	n, victims, ok := s.nextCycleVictims(a)
	if !ok {
		return false
	}
	var moved []int32
	for _, j := range victims {
		if s.jobs[j].planned {
			// Work placed in this cycle is taken back, as a
			// reservation may, and waits for the next cycle:
			// placed again elsewhere on the node, it would be
			// the next cycle's better victim there.
			s.take(a, j, "taken back: the room goes to a job this plan suspends, which comes back there")
			s.holdOver(a, j)
			continue
		}
		fence := func() { s.jobs[j].fenced = true }
		unfence := func() { s.jobs[j].fenced = false }
		fence()
		a.undo = append(a.undo, unfence)
		a.holds = append(a.holds, hold{node: -1, release: unfence, retake: fence})
		for _, al := range s.jobs[j].allocs {
			if !s.allocs.get(al).gone && int(s.allocs.get(al).node) == n {
				s.shift(al, +1)
				moved = append(moved, al)
			}
		}
	}
	gpus, fits := s.cluster.Fits(n, a.task)
	for _, al := range moved {
		s.shift(al, -1)
	}
	if !fits {
		return false
	}
	node := &s.cluster.Nodes[n]
	for _, g := range gpus {
		held := node.GPUs[g].Free
		if held <= 0 {
			continue
		}
		release := func() {
			node.GPUs[g].Free += held
			s.cluster.summarize(n)
			s.cluster.releases++
		}
		retake := func() {
			node.GPUs[g].Free -= held
			s.cluster.summarize(n)
		}
		retake()
		a.undo = append(a.undo, release)
		a.holds = append(a.holds, hold{node: n, release: release, retake: retake})
	}
	return true
}

// nextCycleVictims is where the next cycle would make room for a's
// instance by taking running work: the victim search of reclaim, else of
// preemption, as placeInstance runs them, over running work too.
func (s *state) nextCycleVictims(a *attempt) (int, []int32, bool) {
	over := s.overLimit(a.p, a.inst)
	if over <= 0 && (a.withinGuarantee || a.withinDeserved) {
		for _, way := range s.reclaimSearches(a) {
			way.vs.plannedOnly = false
			if n, victims, ok := s.findVictims(a.task, way.vs); ok {
				return n, victims, true
			}
		}
	}
	vs := s.preemptSearch(a, max(over, 0))
	vs.plannedOnly = false
	return s.findVictims(a.task, vs)
}
