package plan

import (
	"fmt"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// The changes an attempt makes to the plan: placements, suspensions and
// take-backs, each recorded with its undo so that a workload that cannot
// place every instance leaves no trace (see rollback).

// place applies one instance's placement; for a reservation (see
// reserveFor) it only holds the capacity.
func (s *state) place(a *attempt, ch placement.Choice, reason string) error {
	if err := s.cluster.Assign(ch, a.task); err != nil {
		return fmt.Errorf("%w: %w", ErrPlacement, err)
	}
	s.cluster.summarize(ch.Node)
	wl, t, inst := a.wl, a.task, a.inst
	ps := &s.projects[a.p]
	ps.addHeld(inst)
	if !wl.Preemptible {
		ps.nonPreemptible += inst
	}
	reserved := cluster.Shares(0)
	if a.reserve {
		reserved = inst
	}
	ps.reserved += reserved
	gpus := append([]int(nil), ch.GPUs...)
	s.plan.changes++
	if !a.reserve {
		a.instances = append(a.instances, instance{w: int32(a.w), node: int32(ch.Node), gpus: gpus, action: int32(len(s.plan.actions))})
		s.plan.actions = append(s.plan.actions, Action{Kind: Place, Project: wl.Project, Job: wl.Job, Group: wl.Group, Workload: a.w,
			Node: s.cluster.Nodes[ch.Node].Name, GPUs: gpus, Reason: reason})
	}
	release := func() {
		s.cluster.Release(placement.Choice{Node: ch.Node, GPUs: gpus}, t)
		s.cluster.summarize(ch.Node)
		s.cluster.releases++
		ps.addHeld(-inst)
		ps.reserved -= reserved
		if !wl.Preemptible {
			ps.nonPreemptible -= inst
		}
	}
	a.undo = append(a.undo, release)
	if a.reserve {
		a.holds = append(a.holds, hold{node: ch.Node, release: release, retake: func() {
			if err := s.cluster.Assign(placement.Choice{Node: ch.Node, GPUs: gpus}, t); err != nil && s.broken == nil {
				s.broken = fmt.Errorf("%w: holding a released reservation again: %w", ErrPlacement, err)
			}
			s.cluster.summarize(ch.Node)
			ps.addHeld(inst)
			ps.reserved += inst
			if !wl.Preemptible {
				ps.nonPreemptible += inst
			}
		}})
	}
	return nil
}

// placeOn places one instance on node n, on the lowest-numbered GPUs that
// fit there (the victims made room for it).
func (s *state) placeOn(a *attempt, n int, reason string) error {
	gpus, ok := s.cluster.Fits(n, a.task)
	if !ok {
		return fmt.Errorf("node %s: %w", s.cluster.Nodes[n].Name, ErrPlacement)
	}
	return s.place(a, placement.Choice{Node: n, GPUs: gpus}, reason)
}

// suspend stops job j to make room for the workload. A job planned in this
// cycle is not stopped but taken back: its placements leave the plan and
// its workloads wait again.
func (s *state) suspend(a *attempt, j int32, cause Cause, reason string) {
	if s.jobs[j].planned {
		s.takeBack(a, j)
		return
	}
	s.release(j)
	act := s.suspendAction(j, a.w, cause, reason)
	act.ForGuarantee = a.withinGuarantee
	s.plan.actions = append(s.plan.actions, act)
	a.undo = append(a.undo, func() { s.unrelease(j) })
}

// suspendAction is the action that suspends running job j for workload w
// (-1: none).
func (s *state) suspendAction(j int32, w int, cause Cause, reason string) Action {
	job := &s.jobs[j]
	ids := make([]string, 0, len(job.allocs))
	for _, al := range job.allocs {
		if s.allocs.get(al).gone {
			continue // shrunk away in this plan
		}
		// An allocation in several shapes is listed once per shape.
		if id := s.snap.Allocations[al].ID; len(ids) == 0 || id != ids[len(ids)-1] {
			ids = append(ids, id)
		}
	}
	return Action{Kind: Suspend, Project: s.snap.Projects[job.project].Name, Job: job.name, Allocations: ids, Workload: w, Reason: reason, Cause: cause}
}

// takeBack removes planned job j from the plan.
func (s *state) takeBack(a *attempt, j int32) {
	s.release(j)
	pj := s.plan.planned[j]
	for _, i := range pj.actions {
		s.plan.cancelled[i] = true
	}
	for _, w := range pj.workloads {
		s.plan.placed[w] = false
	}
	s.plan.takenBack = append(s.plan.takenBack, pj.workloads...)
	a.undo = append(a.undo, func() {
		s.unrelease(j)
		for _, i := range pj.actions {
			delete(s.plan.cancelled, i)
		}
		for _, w := range pj.workloads {
			s.plan.placed[w] = true
		}
		s.plan.takenBack = s.plan.takenBack[:len(s.plan.takenBack)-len(pj.workloads)]
	})
}

// release marks job j suspended and gives its capacity back. Its shrink
// units still running stop with it.
func (s *state) release(j int32) {
	job := &s.jobs[j]
	for _, al := range job.allocs {
		if !s.allocs.get(al).gone {
			s.shift(al, +1)
		}
	}
	for _, k := range s.unitsOf[j] {
		if unit := &s.jobs[k]; !unit.suspended {
			unit.suspended, unit.byParent = true, true
		}
	}
	job.suspended = true
	ps := &s.projects[job.project]
	ps.addHeld(-job.held)
	if job.nonPreemptible {
		ps.nonPreemptible -= job.held
	}
	if !job.planned {
		ps.suspended = append(ps.suspended, j)
	}
	s.cluster.releases++
	s.plan.changes++
}

// unrelease undoes release(j), except for the change counts.
func (s *state) unrelease(j int32) {
	job := &s.jobs[j]
	for _, al := range job.allocs {
		if !s.allocs.get(al).gone {
			s.shift(al, -1)
		}
	}
	for _, k := range s.unitsOf[j] {
		if unit := &s.jobs[k]; unit.byParent {
			unit.suspended, unit.byParent = false, false
		}
	}
	job.suspended = false
	ps := &s.projects[job.project]
	ps.addHeld(job.held)
	if job.nonPreemptible {
		ps.nonPreemptible += job.held
	}
	if !job.planned {
		ps.suspended = ps.suspended[:len(ps.suspended)-1]
	}
}

// shift gives back (sign +1) or takes again (sign -1) allocation a's
// capacity.
func (s *state) shift(a int32, sign int) {
	al := s.allocs.get(a)
	n := int(al.node)
	node := &s.cluster.Nodes[n]
	node.FreeCPUMilli += int64(sign) * al.cpu
	node.FreeMemoryMiB += int64(sign) * al.mem
	for _, g := range s.allocs.gpusOf(al) {
		node.GPUs[g].Free += cluster.Shares(sign) * cluster.Shares(al.perGPU)
	}
	s.cluster.summarize(n)
}

// rollback undoes every change of the attempt.
func (s *state) rollback(a *attempt) {
	for i := len(a.undo) - 1; i >= 0; i-- {
		a.undo[i]()
	}
	a.undo = a.undo[:0]
	a.instances = a.instances[:0]
	s.plan.actions = s.plan.actions[:a.firstAction]
}

// registerPlanned makes the unit, just placed, a victim for the rest of
// the cycle, as the next cycle would see it (see registerWorkload).
func (s *state) registerPlanned(a *attempt) {
	for _, m := range a.unit {
		s.registerWorkload(a, int(m))
	}
}

// registerWorkload makes the instances of workload w, just placed, part of
// a running job started after every running one. Work of a job that also
// has running allocations is left out (it would be suspended with them),
// and so is work that could not be a victim anyway.
func (s *state) registerWorkload(a *attempt, w int) {
	wl := &s.snap.Pending[w]
	if !wl.Preemptible || wl.GPUShares() == 0 {
		return
	}
	j, ok := s.jobByKey[wl.Job]
	if ok && !s.jobs[j].planned {
		return
	}
	ps := &s.projects[a.p]
	if !ok {
		j = int32(len(s.jobs))
		s.jobByKey[wl.Job] = j
		s.jobs = append(s.jobs, jobState{name: wl.Job, project: int32(a.p), priority: wl.Priority, newest: plannedStart, planned: true})
		s.plan.planned[j] = &plannedJob{}
	} else {
		job := &s.jobs[j]
		if job.suspended {
			job.suspended = false
			job.allocs, job.held = nil, 0
			*s.plan.planned[j] = plannedJob{}
		}
		ps.jobs = deleteJob(ps.jobs, j)
		ps.planned = deleteJob(ps.planned, j)
		job.priority = max(job.priority, wl.Priority)
	}
	job, pj := &s.jobs[j], s.plan.planned[j]
	for _, in := range a.instances {
		if int(in.w) == w {
			n := int(in.node)
			job.allocs = append(job.allocs, s.allocs.add(j, n, &s.snap.Nodes[n], &wl.Ask, in.gpus))
			pj.actions = append(pj.actions, in.action)
		}
	}
	pj.workloads = append(pj.workloads, int32(w))
	job.held += wl.GPUShares()
	ps.jobs = s.insertJob(ps.jobs, j)
	ps.planned = s.insertJob(ps.planned, j)
}

// insertJob inserts job j into a list in victim order.
func (s *state) insertJob(list []int32, j int32) []int32 {
	i, _ := slices.BinarySearchFunc(list, j, s.compareJobs)
	return slices.Insert(list, i, j)
}

// deleteJob deletes job j from a list, if it is there.
func deleteJob(list []int32, j int32) []int32 {
	if i := slices.Index(list, j); i >= 0 {
		return slices.Delete(list, i, i+1)
	}
	return list
}
