package plan

import "github.com/gpushare/nomad-gpushare/scheduler/cluster"

// units groups the pending workloads that are placed together, all or
// none: every task group of a suspended job, because the quota service
// resumes a job as a whole (docs/design.md, Suspension and resumption),
// and every task group of a gang but its shrunk instances (docs/design.md,
// Gangs and elastic groups). Every other workload is a unit by itself:
// Nomad places the groups of a queued job one by one.
type units struct {
	// lead is, per workload, the first workload of its unit.
	lead []int32
	// members lists the workloads of each unit of more than one, by lead;
	// self[w] is w, so that a unit of one is self[w:w+1].
	members map[int32][]int32
	self    []int32
}

func newUnits(snap *cluster.Snapshot) units {
	u := units{lead: make([]int32, len(snap.Pending)), self: make([]int32, len(snap.Pending)), members: map[int32][]int32{}}
	first := map[string]int32{}
	for i := range snap.Pending {
		w := &snap.Pending[i]
		u.lead[i], u.self[i] = int32(i), int32(i)
		if !w.Suspended && !w.Gang || w.Shrunk {
			continue
		}
		l, ok := first[w.Job]
		if !ok {
			first[w.Job] = int32(i)
			continue
		}
		u.lead[i] = l
		if u.members[l] == nil {
			u.members[l] = []int32{l}
		}
		u.members[l] = append(u.members[l], int32(i))
	}
	return u
}

// of returns the workloads of w's unit, its lead first.
func (u *units) of(w int) []int32 {
	l := u.lead[w]
	if m, ok := u.members[l]; ok {
		return m
	}
	return u.self[l : l+1]
}
