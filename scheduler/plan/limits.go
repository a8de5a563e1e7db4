package plan

import (
	"fmt"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// holdToLimits suspends work beyond a project's or a department's hard
// limit. Nomad places queued work on idle GPUs by itself, without knowing
// the limits, so a project can hold more than its limit; its victims (its
// preemptible and exposed jobs, in victim order: lowest job priority, then
// newest) are taken until it is back within the limit, then every one not
// needed for that is put back, from the last taken but one to the first
// (docs/design.md, Reclaim and preempt). A department is then held to its
// limit the same way, its projects' victims taken in victim order. These
// suspensions make room for no workload (Action.Workload is -1).
func (s *state) holdToLimits() {
	for p := range s.projects {
		ps := &s.projects[p]
		if ps.held <= ps.cap {
			continue
		}
		held := ps.held
		taken := takeUntilWithin(s, ps.jobs, held, ps.cap)
		s.suspendForLimit(taken, fmt.Sprintf(
			"project %s holds %s, above its limit %s: its jobs are suspended, lowest priority and newest first, until it is within the limit",
			s.snap.Projects[p].Name, held, ps.cap))
	}
	for d := range s.snap.Departments {
		g := &s.groups[d]
		if g.held <= g.cap {
			continue
		}
		var jobs []int32
		for _, p := range g.members {
			for _, j := range s.projects[p].jobs {
				if !s.jobs[j].suspended {
					jobs = append(jobs, j)
				}
			}
		}
		slices.SortFunc(jobs, s.compareJobs)
		held := g.held
		taken := takeUntilWithin(s, jobs, held, g.cap)
		s.suspendForLimit(taken, fmt.Sprintf(
			"department %s holds %s, above its limit %s: its projects' jobs are suspended in victim order until it is within the limit",
			s.snap.Departments[d].Name, held, g.cap))
	}
}

// takeUntilWithin takes jobs, in their order, until what they hold
// leaves held within limit; then puts back every one not needed, from the
// last taken but one to the first.
func takeUntilWithin(s *state, jobs []int32, held, limit cluster.Shares) []int32 {
	var taken []int32
	var freed cluster.Shares
	for _, j := range jobs {
		if held-freed <= limit {
			break
		}
		taken = append(taken, j)
		freed += s.jobs[j].held
	}
	for i := len(taken) - 2; i >= 0; i-- {
		if u := s.jobs[taken[i]].held; held-(freed-u) <= limit {
			freed -= u
			taken = append(taken[:i], taken[i+1:]...)
		}
	}
	return taken
}

// suspendForLimit suspends the jobs taken to hold a limit.
func (s *state) suspendForLimit(taken []int32, reason string) {
	for _, j := range taken {
		s.release(j)
		s.plan.actions = append(s.plan.actions, s.suspendAction(j, -1, CauseLimit, reason))
	}
}
