package plan

import (
	"fmt"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
)

// Apply returns the snapshot that results from carrying out res on snap:
// suspended jobs leave the allocations and come back as pending workloads
// (Suspended, submitted at their oldest start), placed workloads leave the
// pending list and become allocations started at now. Nodes and projects are
// shared with snap. Multi-round tests and simulations use it to run the
// planner again on its own decisions.
func Apply(snap *model.Snapshot, res Result, now int64) *model.Snapshot {
	next := &model.Snapshot{Nodes: snap.Nodes, Projects: snap.Projects}
	suspended := map[string]bool{}
	placed := map[int]bool{}
	for _, a := range res.Actions {
		if a.Kind == Suspend {
			suspended[a.Job] = true
		} else {
			placed[a.Workload] = true
		}
	}
	type groupKey struct {
		job, group string
		ask        string
	}
	resumed := map[groupKey]int{}
	for _, a := range snap.Allocations {
		if !suspended[a.Job] {
			next.Allocations = append(next.Allocations, a)
			continue
		}
		k := groupKey{a.Job, a.Group, fmt.Sprint(a.Ask, a.Priority, a.Preemptible, a.Gang, a.MinCount)}
		if i, ok := resumed[k]; ok {
			next.Pending[i].Count++
			next.Pending[i].Submit = min(next.Pending[i].Submit, a.Start)
			continue
		}
		resumed[k] = len(next.Pending)
		next.Pending = append(next.Pending, model.Pending{
			Project: a.Project, Job: a.Job, Group: a.Group, Priority: a.Priority, Preemptible: a.Preemptible,
			Ask: a.Ask, Count: 1, Submit: a.Start, Suspended: true, Gang: a.Gang, MinCount: a.MinCount,
		})
	}
	for i, w := range snap.Pending {
		if !placed[i] {
			next.Pending = append(next.Pending, w)
		}
	}
	seq := map[int]int{}
	for _, a := range res.Actions {
		if a.Kind != Place {
			continue
		}
		w := &snap.Pending[a.Workload]
		k := seq[a.Workload]
		seq[a.Workload]++
		next.Allocations = append(next.Allocations, model.Allocation{
			ID: fmt.Sprintf("%s/%s/%d@%d", w.Job, w.Group, k, now), Project: w.Project, Job: w.Job, Group: w.Group,
			Priority: w.Priority, Preemptible: w.Preemptible, Ask: w.Ask, Node: a.Node, GPUs: a.GPUs, Start: now,
			Gang: w.Gang, MinCount: w.MinCount,
		})
	}
	return next
}
