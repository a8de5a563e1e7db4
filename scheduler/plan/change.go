package plan

import (
	"fmt"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// The changes an attempt makes to the plan: placements, suspensions and
// take-backs, each recorded with its undo so that a workload that cannot
// place every instance leaves no trace (see rollback).

// place applies one instance's placement.
func (s *state) place(a *attempt, ch placement.Choice, reason string) error {
	if err := s.cluster.Assign(ch, a.task); err != nil {
		return fmt.Errorf("%w: %w", ErrPlacement, err)
	}
	s.cluster.summarize(ch.Node)
	wl, t, inst := a.wl, a.task, a.inst
	ps := &s.projects[a.p]
	ps.usage += inst
	if !wl.Preemptible {
		ps.nonPreemptible += inst
	}
	gpus := append([]int(nil), ch.GPUs...)
	a.instances = append(a.instances, instance{node: int32(ch.Node), gpus: gpus, action: int32(len(s.plan.actions))})
	s.plan.changes++
	s.plan.actions = append(s.plan.actions, Action{Kind: Place, Project: wl.Project, Job: wl.Job, Group: wl.Group, Workload: a.w,
		Node: s.cluster.Nodes[ch.Node].Name, GPUs: gpus, Reason: reason})
	a.undo = append(a.undo, func() {
		s.cluster.Release(placement.Choice{Node: ch.Node, GPUs: gpus}, t)
		s.cluster.summarize(ch.Node)
		s.cluster.releases++
		ps.usage -= inst
		if !wl.Preemptible {
			ps.nonPreemptible -= inst
		}
	})
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
func (s *state) suspend(a *attempt, j int32, reason string) {
	job := &s.jobs[j]
	if job.planned {
		s.takeBack(a, j)
		return
	}
	ids := make([]string, len(job.allocs))
	for i, al := range job.allocs {
		ids[i] = s.snap.Allocations[al].ID
	}
	s.release(j)
	s.plan.actions = append(s.plan.actions, Action{Kind: Suspend, Project: s.snap.Projects[job.project].Name, Job: job.name, Allocations: ids, Workload: a.w, Reason: reason})
	a.undo = append(a.undo, func() { s.unrelease(j) })
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

// release marks job j suspended and gives its capacity back.
func (s *state) release(j int32) {
	job := &s.jobs[j]
	for _, al := range job.allocs {
		s.shift(al, +1)
	}
	job.suspended = true
	s.projects[job.project].usage -= job.usage
	s.cluster.releases++
	s.plan.changes++
}

// unrelease undoes release(j), except for the change counts.
func (s *state) unrelease(j int32) {
	job := &s.jobs[j]
	for _, al := range job.allocs {
		s.shift(al, -1)
	}
	job.suspended = false
	s.projects[job.project].usage += job.usage
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
		node.GPUs[g].FreeMilli += sign * int(al.perGPU)
	}
	s.cluster.summarize(n)
}

// rollback undoes every change of the attempt.
func (s *state) rollback(a *attempt) {
	for i := len(a.undo) - 1; i >= 0; i-- {
		a.undo[i]()
	}
	a.undo = a.undo[:0]
	s.plan.actions = s.plan.actions[:a.firstAction]
}

// registerPlanned makes the instances of the workload, just placed, a
// victim for the rest of the cycle, as the next cycle would see them: part
// of a running job, started after every running one. Work of a job that
// also has running allocations is left out (it would be suspended with
// them), and so is work that could not be a victim anyway.
func (s *state) registerPlanned(a *attempt) {
	wl := a.wl
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
		s.jobs = append(s.jobs, jobState{name: wl.Job, project: int32(a.p), priority: wl.Priority, preemptible: true, newest: plannedStart, planned: true})
		s.plan.planned[j] = &plannedJob{}
	} else {
		job := &s.jobs[j]
		if job.suspended {
			job.suspended = false
			job.allocs, job.usage = nil, 0
			*s.plan.planned[j] = plannedJob{}
		}
		if i := slices.Index(ps.jobs, j); i >= 0 {
			ps.jobs = slices.Delete(ps.jobs, i, i+1)
		}
		job.priority = max(job.priority, wl.Priority)
	}
	job, pj := &s.jobs[j], s.plan.planned[j]
	for _, in := range a.instances {
		job.allocs = append(job.allocs, s.allocs.add(int(in.node), &wl.Ask, in.gpus))
		pj.actions = append(pj.actions, in.action)
	}
	pj.workloads = append(pj.workloads, int32(a.w))
	job.usage += wl.GPUShares()
	i, _ := slices.BinarySearchFunc(ps.jobs, j, s.compareJobs)
	ps.jobs = slices.Insert(ps.jobs, i, j)
}
