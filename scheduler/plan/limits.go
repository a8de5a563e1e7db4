package plan

import (
	"fmt"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// holdToLimits suspends work beyond a project's hard limit. Nomad places
// queued work on idle GPUs by itself, without knowing the limits, so a
// project can hold more than its limit; its victims (its preemptible and
// exposed jobs, in victim order: lowest job priority, then newest) are
// taken until it is back within the limit, then every one not needed for
// that is put back, from the last taken but one to the first
// (docs/design.md, Reclaim and preempt). These suspensions make room for
// no workload (Action.Workload is -1).
func (s *state) holdToLimits() {
	for p := range s.projects {
		ps := &s.projects[p]
		if ps.held <= ps.cap {
			continue
		}
		held := ps.held
		var taken []int32
		var freed cluster.Shares
		for _, j := range ps.jobs {
			if held-freed <= ps.cap {
				break
			}
			taken = append(taken, j)
			freed += s.jobs[j].held
		}
		for i := len(taken) - 2; i >= 0; i-- {
			if u := s.jobs[taken[i]].held; held-(freed-u) <= ps.cap {
				freed -= u
				taken = append(taken[:i], taken[i+1:]...)
			}
		}
		name := s.snap.Projects[p].Name
		for _, j := range taken {
			s.release(j)
			s.plan.actions = append(s.plan.actions, s.suspendAction(j, -1, fmt.Sprintf(
				"project %s holds %s, above its limit %s: its jobs are suspended, lowest priority and newest first, until it is within the limit",
				name, held, ps.cap)))
		}
	}
}
