package plan

import (
	"fmt"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// An elastic task group (cluster.Allocation.MinCount above 0) runs between
// its minimum and its count. Reclaim and preemption shrink elastic groups
// toward their minimum before they suspend any whole job (docs/design.md,
// Victim order): every instance above a group's minimum, newest first, is
// a shrink unit, a victim of its own in the victim order (listShrinks).
// For each instance to place, the victims are first sought among shrink
// units only; only when no set of them makes room on one node are whole
// jobs sought (findVictims with victimSearch.shrink). A shrunk instance
// comes back as Shrunk pending work that grows back only on capacity
// nothing else waits for (grow).

// listShrinks makes every instance above the minimum of an elastic group
// of a job on its project's list of victims (see listVictims) a shrink
// unit, in the order Nomad stops them when the count falls
// (cluster.CompareStopOrder), as many as the group runs above its
// minimum. An instance held in several shapes (several allocations with
// one ID) is one unit, started when the latest of them started.
func (s *state) listShrinks() {
	type member struct {
		cluster.GroupMember
		allocs []int32
	}
	type group struct {
		job     int32
		name    string
		min     int
		members []member
	}
	var groups []group
	index := map[string]int{}
	for i := range s.snap.Allocations {
		al := &s.snap.Allocations[i]
		if al.MinCount <= 0 {
			continue
		}
		j := s.jobByKey[al.Job]
		if job := &s.jobs[j]; job.planned || !job.victim() {
			continue
		}
		key := al.Job + "\x00" + al.Group
		g, ok := index[key]
		if !ok {
			g = len(groups)
			index[key] = g
			groups = append(groups, group{job: j, name: al.Group})
		}
		gr := &groups[g]
		gr.min = max(gr.min, al.MinCount)
		k := slices.IndexFunc(gr.members, func(m member) bool { return m.ID == al.ID })
		if k < 0 {
			gr.members = append(gr.members, member{GroupMember: cluster.MemberOf(al)})
			k = len(gr.members) - 1
		}
		gr.members[k].allocs = append(gr.members[k].allocs, int32(i))
		gr.members[k].Start = max(gr.members[k].Start, al.Start)
	}
	for _, gr := range groups {
		if len(gr.members) <= gr.min {
			continue
		}
		slices.SortFunc(gr.members, func(x, y member) int { return cluster.CompareStopOrder(x.GroupMember, y.GroupMember) })
		for _, m := range gr.members[:len(gr.members)-gr.min] {
			s.addShrink(gr.job, shrinkUnit{group: gr.name, id: m.ID}, m.Start, m.allocs)
		}
	}
	if s.shrinking {
		for i := range s.projects {
			slices.SortFunc(s.projects[i].shrinks, s.compareJobs)
		}
	}
}

// shrinkUnit is what a shrink unit stops: one instance (allocation ID id)
// of an elastic group.
type shrinkUnit struct {
	group, id string
}

// addShrink records one instance of parent job j's group as a shrink unit.
func (s *state) addShrink(j int32, what shrinkUnit, start int64, allocs []int32) {
	if !s.shrinking {
		s.shrinking = true
		s.shrinkUnits, s.unitsOf = map[int32]shrinkUnit{}, map[int32][]int32{}
		s.allocShrink = make([]int32, len(s.snap.Allocations))
		for i := range s.allocShrink {
			s.allocShrink[i] = -1
		}
	}
	parent := s.jobs[j]
	k := int32(len(s.jobs))
	unit := jobState{name: parent.name, project: parent.project, priority: parent.priority,
		nonPreemptible: parent.nonPreemptible, exposed: parent.exposed, newest: start, allocs: allocs,
		shrink: true, parent: j, rank: int32(len(s.unitsOf[j]))}
	unit.young = true
	for _, a := range allocs {
		unit.held += s.snap.Allocations[a].Ask.GPUShares()
		unit.young = unit.young && s.snap.Allocations[a].InMinRuntime
		s.allocShrink[a] = k
	}
	s.jobs = append(s.jobs, unit)
	s.shrinkUnits[k] = what
	s.unitsOf[j] = append(s.unitsOf[j], k)
	s.projects[parent.project].shrinks = append(s.projects[parent.project].shrinks, k)
}

// inStopOrder reports whether job j, when it is a shrink unit, is the next
// instance its group loses. A shrink is a scale of the group's count by
// one, and Nomad stops the highest-numbered instance: the units of a group
// go in listShrinks' order, so a unit is a victim only once every unit
// ranked before it in its group is shrunk. A search may take one unit per
// group; the next becomes a victim once the plan has shrunk that one
// (found by the chaos soak: a plan that shrank the instance on the node
// it needed, not the one Nomad stops, was held back by the service every
// cycle, and the project it was for waited without end).
func (s *state) inStopOrder(j int32) bool {
	job := &s.jobs[j]
	if !job.shrink || job.rank == 0 {
		return true
	}
	group := s.shrinkUnits[j].group
	for _, k := range s.unitsOf[job.parent][:job.rank] {
		if s.shrinkUnits[k].group == group && !s.jobs[k].suspended {
			return false
		}
	}
	return true
}

// shrinkOf is the shrink unit allocation a belongs to, or -1.
func (s *state) shrinkOf(a int32) int32 {
	if s.allocShrink == nil || int(a) >= len(s.allocShrink) {
		return -1
	}
	return s.allocShrink[a]
}

// take stops victim j for the workload: a shrink unit is shrunk away, any
// other job suspended (see suspend).
func (s *state) take(a *attempt, j int32, reason string) {
	if s.jobs[j].shrink {
		s.shrink(a, j, reason)
		return
	}
	s.suspend(a, j, CauseReclaim, reason)
}

// shrink stops shrink unit k: its instance leaves its job, which keeps
// running with the rest.
func (s *state) shrink(a *attempt, k int32, reason string) {
	s.setShrunk(k, true)
	s.cluster.releases++
	s.plan.changes++
	unit, what := &s.jobs[k], s.shrinkUnits[k]
	s.plan.actions = append(s.plan.actions, Action{Kind: Shrink, Project: s.snap.Projects[unit.project].Name, Job: unit.name,
		Group: what.group, Allocations: []string{what.id}, Workload: a.w, Reason: reason})
	a.undo = append(a.undo, func() { s.setShrunk(k, false) })
}

// setShrunk stops shrink unit k (on) or runs it again (off): its capacity
// is given back or taken again, and its usage leaves or rejoins its job
// and project.
func (s *state) setShrunk(k int32, on bool) {
	unit := &s.jobs[k]
	sign, usage := 1, unit.held
	if !on {
		sign, usage = -1, -usage
	}
	for _, al := range unit.allocs {
		s.shift(al, sign)
		s.allocs.get(al).gone = on
	}
	unit.suspended = on
	s.jobs[unit.parent].held -= usage
	ps := &s.projects[unit.project]
	ps.addHeld(-usage)
	if unit.nonPreemptible {
		ps.nonPreemptible -= usage
	}
}

// Growth is an elastic group that may grow back toward its count: Count
// of its shrunk instances (the Shrunk pending workload Workload) fit now,
// on the nodes and GPUs of Places, one per instance.
type Growth struct {
	Workload            int
	Project, Job, Group string
	Count               int
	Places              []Placement
}

// Placement is where one instance goes: a node and GPU indexes on it.
type Placement struct {
	Node string
	GPUs []int
}

// mayGrow reports whether the plan leaves room for growth: growth is the
// plan's lowest priority, so it happens only in a plan that leaves no
// workload waiting, suspends or shrinks nothing and makes no gang wait.
// Then no work the next plan tries could want what growth takes, and no
// grown instance is shrunk again with nothing changed.
func (s *state) mayGrow() bool {
	if len(s.plan.unplaced) > 0 || len(s.gangs.waiting) > 0 {
		return false
	}
	for i, a := range s.plan.actions {
		if a.Kind != Place && !s.plan.cancelled[int32(i)] {
			return false
		}
	}
	return true
}

// grow walks the shrunk instances of running elastic groups in fairness
// order and grows each group by the instances that fit on idle capacity,
// within its project's limit (and, for non-preemptible work, guarantee):
// never by reclaim or preemption.
func (s *state) grow() error {
	if !s.mayGrow() {
		return nil
	}
	queued := false
	for w := range s.snap.Pending {
		if wl := &s.snap.Pending[w]; wl.Shrunk && !s.plan.never[w] {
			s.enqueue(w)
			queued = true
		}
	}
	if !queued {
		return nil
	}
	s.growing = true
	defer func() { s.growing = false }()
	return s.walkQueues()
}

// tryGrow grows the elastic group of shrunk workload w of project p by as
// many instances as fit.
func (s *state) tryGrow(w, p int) error {
	wl := &s.snap.Pending[w]
	j, ok := s.jobByKey[wl.Job]
	if !ok || s.jobs[j].planned || s.jobs[j].suspended {
		return nil // the group's job does not run: nothing grows
	}
	a := s.startAttempt(w, p)
	ps := &s.projects[p]
	g := Growth{Workload: w, Project: wl.Project, Job: wl.Job, Group: wl.Group}
	for range wl.Count {
		if s.overLimit(p, a.inst) > 0 || !wl.Preemptible && ps.nonPreemptible+a.inst > ps.guaranteed {
			break
		}
		ch, ok := s.cluster.placeIdle(a.task, a.nodes)
		if !ok {
			break
		}
		if err := s.cluster.Assign(ch, a.task); err != nil {
			return fmt.Errorf("%w: %w", ErrPlacement, err)
		}
		s.cluster.summarize(ch.Node)
		ps.addHeld(a.inst)
		if !wl.Preemptible {
			ps.nonPreemptible += a.inst
		}
		g.Places = append(g.Places, Placement{Node: s.cluster.Nodes[ch.Node].Name, GPUs: append([]int(nil), ch.GPUs...)})
	}
	if g.Count = len(g.Places); g.Count > 0 {
		s.plan.grow = append(s.plan.grow, g)
	}
	return nil
}
