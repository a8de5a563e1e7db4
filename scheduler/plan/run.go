package plan

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// run walks the pending workloads in fairness order, then walks again the
// ones left waiting (and those whose placement a later workload took back)
// for as long as a walk places something. Work placed in this cycle is a
// victim like running work (see registerPlanned), so a workload that could
// only fit once later work was placed is placed now instead of reclaiming
// that work in the next cycle: a plan never starts work that the next plan,
// with nothing else changed, would suspend.
func (s *state) run() error {
	s.initSummaries()
	for i := range s.snap.Pending {
		p := &s.projects[s.index.PendingProject[i]]
		p.queue = append(p.queue, int32(i))
	}
	if err := s.walkQueues(); err != nil {
		return err
	}
	// Every successful walk places at least one workload for good or takes
	// one back; the bound only guards against a bug.
	for range len(s.snap.Pending) + 1 {
		again := s.unplaced[:0:0]
		keep := s.unplaced[:0]
		for _, u := range s.unplaced {
			if s.changes == s.failedAt[u.Workload] {
				keep = append(keep, u)
				continue
			}
			again = append(again, u)
		}
		for _, w := range s.takenBack {
			if !s.placed[w] {
				again = append(again, Unplaced{Workload: int(w)})
			}
		}
		s.takenBack = s.takenBack[:0]
		if len(again) == 0 {
			break
		}
		s.unplaced = keep
		for _, u := range again {
			p := &s.projects[s.index.PendingProject[u.Workload]]
			p.queue = append(p.queue, int32(u.Workload))
		}
		placed := s.placements
		if err := s.walkQueues(); err != nil {
			return err
		}
		if s.placements == placed {
			break
		}
	}
	for _, w := range s.takenBack {
		if !s.placed[w] {
			s.unplaced = append(s.unplaced, Unplaced{int(w), "its placement was taken back in this plan by a workload entitled to reclaim it"})
		}
	}
	return nil
}

// walkQueues tries the queued workloads, always the next one of the
// project first in fairness order, until every queue is empty.
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
		w := ps.queue[0]
		ps.queue = ps.queue[1:]
		if err := s.tryWorkload(int(w), best); err != nil {
			return err
		}
	}
}

// fairnessClass: 0 below guarantee, 1 below deserved share, 2 otherwise.
func (p *projectState) fairnessClass() int {
	switch {
	case p.usage < p.guaranteed:
		return 0
	case p.usage < p.deserved:
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
	ca, cb := pa.fairnessClass(), pb.fairnessClass()
	if ca != cb {
		return cmp.Compare(ca, cb)
	}
	var c int
	switch ca {
	case 0:
		c = cmp.Compare(pa.usage*pb.guaranteed, pb.usage*pa.guaranteed)
	case 1:
		c = cmp.Compare(pa.usage*pb.deserved, pb.usage*pa.deserved)
	default:
		c = cmp.Compare(pa.usage-pa.deserved, pb.usage-pb.deserved)
	}
	if c != 0 {
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

// tryWorkload places every instance of pending workload w of project p, or
// none: a failure undoes the instances already planned.
func (s *state) tryWorkload(w, p int) error {
	wl := &s.snap.Pending[w]
	ps := &s.projects[p]
	name := s.snap.Projects[p].Name
	s.undo = s.undo[:0]
	s.instances = s.instances[:0]
	s.failedAt[w] = s.changes
	if j, ok := s.jobByKey[wl.Job]; ok && s.jobs[j].suspended && !s.jobs[j].planned {
		s.unplaced = append(s.unplaced, Unplaced{w, "its job is suspended in this plan"})
		return nil
	}
	total := wl.GPUShares()
	if !wl.Preemptible && ps.nonPreemptible+total > ps.guaranteed {
		s.unplaced = append(s.unplaced, Unplaced{w, fmt.Sprintf(
			"non-preemptible work runs only within the guarantee: project %s guarantees %s, runs %s non-preemptible, asks %s",
			name, ps.guaranteed, ps.nonPreemptible, total)})
		return nil
	}
	exclude := int32(-1)
	if j, ok := s.jobByKey[wl.Job]; ok {
		exclude = j
	}
	withinGuarantee := ps.usage+total <= ps.guaranteed
	withinDeserved := ps.usage+total <= ps.deserved
	t := s.task(wl.Ask)
	inst := wl.Ask.GPUShares()
	markActions, markUndo := len(s.actions), len(s.undo)
	resume := ""
	if wl.Suspended {
		resume = "resume suspended job; "
	}
	for range wl.Count {
		overLimit := ps.usage + inst - ps.cap
		if overLimit <= 0 {
			if ch, ok := s.placeIdle(t); ok {
				if err := s.place(w, p, t, ch, resume+s.idleReason(p, inst)); err != nil {
					return err
				}
				continue
			}
			if withinGuarantee || withinDeserved {
				if ok, err := s.reclaim(w, p, t, exclude, withinGuarantee, resume); err != nil || ok {
					if err != nil {
						return err
					}
					continue
				}
			}
		}
		if ok, err := s.preempt(w, p, t, exclude, max(overLimit, 0), resume); err != nil || ok {
			if err != nil {
				return err
			}
			continue
		}
		s.rollback(markActions, markUndo)
		s.failedAt[w] = s.changes
		s.unplaced = append(s.unplaced, Unplaced{w, s.failReason(p, total, overLimit > 0, withinGuarantee, withinDeserved)})
		return nil
	}
	s.placements++
	s.placed[w] = true
	s.registerPlanned(w, p)
	return nil
}

func (s *state) failReason(p int, total model.Shares, overLimit, withinGuarantee, withinDeserved bool) string {
	ps := &s.projects[p]
	name := s.snap.Projects[p].Name
	switch {
	case overLimit:
		return fmt.Sprintf("project %s would exceed its limit %s (uses %s, asks %s) and has no lower-priority job to preempt",
			name, ps.cap, ps.usage, total)
	case withinGuarantee:
		return fmt.Sprintf("no idle capacity fits, and no set of jobs from over-quota projects or lower-priority jobs of project %s makes it fit", name)
	case withinDeserved:
		return fmt.Sprintf("no idle capacity fits, and no set of jobs from projects above their deserved share or lower-priority jobs of project %s makes it fit", name)
	}
	return fmt.Sprintf("no idle capacity fits; project %s would go above its guarantee %s and deserved share %s (uses %s, asks %s), so it may not reclaim",
		name, ps.guaranteed, ps.deserved, ps.usage, total)
}

func (s *state) idleReason(p int, inst model.Shares) string {
	ps := &s.projects[p]
	after := ps.usage + inst
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
// to fit one instance.
func (s *state) reclaim(w, p int, t placement.Task, exclude int32, withinGuarantee bool, resume string) (bool, error) {
	floor := func(q int32) model.Shares { return s.projects[q].deserved }
	what := "deserved share"
	if withinGuarantee {
		floor = func(q int32) model.Shares { return s.projects[q].guaranteed }
		what = "guarantee"
	}
	var from []int32
	for q := range s.projects {
		if q != p && s.projects[q].usage > floor(int32(q)) {
			from = append(from, int32(q))
		}
	}
	if len(from) == 0 {
		return false, nil
	}
	n, victims, ok := s.findVictims(t, victimSearch{projects: from, floor: floor, exclude: exclude})
	if !ok {
		return false, nil
	}
	wl := &s.snap.Pending[w]
	for _, j := range victims {
		q := s.jobs[j].project
		qs := &s.projects[q]
		s.suspend(j, w, fmt.Sprintf("reclaim for project %s (within its %s): project %s holds %s, above its %s %s; makes room for %s/%s on %s",
			s.snap.Projects[p].Name, what, s.snap.Projects[q].Name, qs.usage, what, floor(q), wl.Job, wl.Group, s.cluster.Nodes[n].Name))
	}
	return true, s.placeOn(w, p, t, n, fmt.Sprintf("%sreclaimed %d job(s) from projects above their %s; project %s stays within its %s",
		resume, len(victims), what, s.snap.Projects[p].Name, what))
}

// preempt suspends lower-priority jobs of the workload's own project to fit
// one instance; mustFree is what they must free to keep the project within
// its limit.
func (s *state) preempt(w, p int, t placement.Task, exclude int32, mustFree model.Shares, resume string) (bool, error) {
	wl := &s.snap.Pending[w]
	prio := wl.Priority
	n, victims, ok := s.findVictims(t, victimSearch{
		projects:      []int32{int32(p)},
		floor:         func(int32) model.Shares { return 0 },
		belowPriority: &prio,
		exclude:       exclude,
		mustFree:      mustFree,
	})
	if !ok {
		return false, nil
	}
	for _, j := range victims {
		s.suspend(j, w, fmt.Sprintf("preempt inside project %s: job priority %d below pending %s/%s priority %d; makes room on %s",
			s.snap.Projects[p].Name, s.jobs[j].priority, wl.Job, wl.Group, prio, s.cluster.Nodes[n].Name))
	}
	return true, s.placeOn(w, p, t, n, fmt.Sprintf("%spreempted %d lower-priority job(s) of project %s", resume, len(victims), s.snap.Projects[p].Name))
}

// rollback undoes every change made after the marks.
func (s *state) rollback(markActions, markUndo int) {
	for i := len(s.undo) - 1; i >= markUndo; i-- {
		s.undo[i]()
	}
	s.undo = s.undo[:markUndo]
	s.actions = s.actions[:markActions]
}

// suspend stops job j to make room for workload w. A job planned in this
// cycle is not stopped but taken back: its placements leave the plan and
// its workloads wait again.
func (s *state) suspend(j int32, w int, reason string) {
	job := &s.jobs[j]
	if job.planned {
		s.takeBack(j)
		return
	}
	ps := &s.projects[job.project]
	ids := make([]string, len(job.allocs))
	for i, a := range job.allocs {
		ids[i] = s.snap.Allocations[a].ID
		s.shift(a, +1)
	}
	job.suspended = true
	ps.usage -= job.usage
	s.releases++
	s.changes++
	s.actions = append(s.actions, Action{Kind: Suspend, Project: s.snap.Projects[job.project].Name, Job: job.name, Allocations: ids, Workload: w, Reason: reason})
	s.undo = append(s.undo, func() {
		job := &s.jobs[j]
		for _, a := range job.allocs {
			s.shift(a, -1)
		}
		job.suspended = false
		s.projects[job.project].usage += job.usage
	})
}

// takeBack removes planned job j from the plan.
func (s *state) takeBack(j int32) {
	job := &s.jobs[j]
	for _, a := range job.allocs {
		s.shift(a, +1)
	}
	job.suspended = true
	s.projects[job.project].usage -= job.usage
	pj := s.plannedOf[j]
	for _, i := range pj.actions {
		s.cancelled[i] = true
	}
	for _, w := range pj.workloads {
		s.placed[w] = false
	}
	s.takenBack = append(s.takenBack, pj.workloads...)
	s.releases++
	s.changes++
	s.undo = append(s.undo, func() {
		job := &s.jobs[j]
		for _, a := range job.allocs {
			s.shift(a, -1)
		}
		job.suspended = false
		s.projects[job.project].usage += job.usage
		for _, i := range pj.actions {
			delete(s.cancelled, i)
		}
		for _, w := range pj.workloads {
			s.placed[w] = true
		}
		s.takenBack = s.takenBack[:len(s.takenBack)-len(pj.workloads)]
	})
}

// registerPlanned makes the instances of workload w of project p, just
// placed, a victim for the rest of the cycle, as the next cycle would see
// them: part of a running job, started after every running one. Work of a
// job that also has running allocations is left out (it would be suspended
// with them), and so is work that could not be a victim anyway.
func (s *state) registerPlanned(w, p int) {
	wl := &s.snap.Pending[w]
	if !wl.Preemptible || wl.GPUShares() == 0 {
		return
	}
	j, ok := s.jobByKey[wl.Job]
	if ok && !s.jobs[j].planned {
		return
	}
	ps := &s.projects[p]
	if !ok {
		j = int32(len(s.jobs))
		s.jobByKey[wl.Job] = j
		s.jobs = append(s.jobs, jobState{name: wl.Job, project: int32(p), priority: wl.Priority, preemptible: true, newest: plannedStart, planned: true})
		s.plannedOf[j] = &plannedJob{}
	} else {
		job := &s.jobs[j]
		if job.suspended {
			job.suspended = false
			job.allocs, job.usage = nil, 0
			*s.plannedOf[j] = plannedJob{}
		}
		if i := slices.Index(ps.jobs, j); i >= 0 {
			ps.jobs = slices.Delete(ps.jobs, i, i+1)
		}
		job.priority = max(job.priority, wl.Priority)
	}
	job, pj := &s.jobs[j], s.plannedOf[j]
	for _, in := range s.instances {
		job.allocs = append(job.allocs, s.addAlloc(int(in.node), &wl.Ask, in.gpus))
		pj.actions = append(pj.actions, in.action)
	}
	pj.workloads = append(pj.workloads, int32(w))
	job.usage += wl.GPUShares()
	i, _ := slices.BinarySearchFunc(ps.jobs, j, s.compareJobs)
	ps.jobs = slices.Insert(ps.jobs, i, j)
}

// shift gives back (sign +1) or takes again (sign -1) allocation a's
// capacity.
func (s *state) shift(a int32, sign int) {
	al := &s.allocs[a]
	n := int(al.node)
	node := &s.cluster.Nodes[n]
	node.FreeCPUMilli += int64(sign) * al.cpu
	node.FreeMemoryMiB += int64(sign) * al.mem
	for _, g := range s.allocGPUs(al) {
		node.GPUs[g].Free += model.Shares(sign) * model.Shares(al.shares)
	}
	s.summarize(n)
}

// placeOn places one instance on node n, on the lowest-numbered GPUs that
// fit there (the victims made room for it).
func (s *state) placeOn(w, p int, t placement.Task, n int, reason string) error {
	gpus, ok := s.cluster.Fits(n, t)
	if !ok {
		return fmt.Errorf("node %s: %w", s.cluster.Nodes[n].Name, ErrPlacement)
	}
	return s.place(w, p, t, placement.Choice{Node: n, GPUs: gpus}, reason)
}

// place applies one instance's placement.
func (s *state) place(w, p int, t placement.Task, ch placement.Choice, reason string) error {
	if err := s.cluster.Assign(ch, t); err != nil {
		return fmt.Errorf("%w: %w", ErrPlacement, err)
	}
	s.summarize(ch.Node)
	wl := &s.snap.Pending[w]
	ps := &s.projects[p]
	inst := wl.Ask.GPUShares()
	ps.usage += inst
	if !wl.Preemptible {
		ps.nonPreemptible += inst
	}
	gpus := append([]int(nil), ch.GPUs...)
	s.instances = append(s.instances, instance{node: int32(ch.Node), gpus: gpus, action: int32(len(s.actions))})
	s.changes++
	s.actions = append(s.actions, Action{Kind: Place, Project: wl.Project, Job: wl.Job, Group: wl.Group, Workload: w,
		Node: s.cluster.Nodes[ch.Node].Name, GPUs: gpus, Reason: reason})
	s.undo = append(s.undo, func() {
		s.cluster.Release(placement.Choice{Node: ch.Node, GPUs: gpus}, t)
		s.summarize(ch.Node)
		s.releases++
		ps.usage -= inst
		if !wl.Preemptible {
			ps.nonPreemptible -= inst
		}
	})
	return nil
}
