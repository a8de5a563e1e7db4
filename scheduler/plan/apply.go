package plan

import (
	"fmt"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// Apply returns the snapshot that results from carrying out res on snap:
// suspended jobs leave the allocations and come back as pending workloads
// (Suspended, submitted at their oldest start, with what Nomad had still
// to place of them), shrunk instances leave the
// allocations and come back as Shrunk pending workloads of their group,
// placed workloads leave the pending list and become allocations started
// at now, and so do the instances that grow back (Result.Grow). Nodes and
// projects are shared with snap. Multi-round tests and simulations use it
// to run the planner again on its own decisions.
func Apply(snap *cluster.Snapshot, res Result, now int64) *cluster.Snapshot {
	next := &cluster.Snapshot{Nodes: snap.Nodes, Projects: snap.Projects, Departments: snap.Departments}
	suspended := map[string]bool{}
	shrunk := map[string]bool{}
	placed := map[int]bool{}
	for _, a := range res.Actions {
		switch a.Kind {
		case Suspend:
			suspended[a.Job] = true
		case Shrink:
			for _, id := range a.Allocations {
				shrunk[a.Job+"\x00"+id] = true
			}
		default:
			placed[a.Workload] = true
		}
	}
	grown := map[int]int{}
	for _, g := range res.Grow {
		grown[g.Workload] += g.Count
	}
	type groupKey struct {
		job, group string
		ask        string
		shrunk     bool
	}
	back := map[groupKey]int{}
	// comeBack turns running allocation a into pending work: a suspended
	// job's, or a shrunk instance of an elastic group.
	comeBack := func(a cluster.Allocation, isShrunk bool) {
		k := groupKey{a.Job, a.Group, fmt.Sprint(a.Ask, a.Priority, a.Preemptible, a.Gang, a.MinCount), isShrunk}
		if i, ok := back[k]; ok {
			next.Pending[i].Count++
			next.Pending[i].Submit = min(next.Pending[i].Submit, a.Start)
			return
		}
		back[k] = len(next.Pending)
		next.Pending = append(next.Pending, cluster.Pending{
			Project: a.Project, Job: a.Job, Group: a.Group, Priority: a.Priority, Preemptible: a.Preemptible,
			Ask: a.Ask, Count: 1, Submit: a.Start, Suspended: !isShrunk, Gang: a.Gang, MinCount: a.MinCount, Shrunk: isShrunk,
		})
	}
	for _, a := range snap.Allocations {
		switch {
		case shrunk[a.Job+"\x00"+a.ID]:
			// Shrunk first: a job suspended after a shrink comes back
			// at its shrunk size.
			comeBack(a, true)
		case suspended[a.Job]:
			comeBack(a, false)
		default:
			next.Allocations = append(next.Allocations, a)
		}
	}
	for i, w := range snap.Pending {
		if placed[i] {
			continue
		}
		if w.Count -= grown[i]; w.Count <= 0 {
			continue
		}
		if suspended[w.Job] && !w.Suspended && !w.Shrunk {
			// A stopped job has nothing queued: what Nomad had still to
			// place comes back with the rest of the job.
			k := groupKey{w.Job, w.Group, fmt.Sprint(w.Ask, w.Priority, w.Preemptible, w.Gang, w.MinCount), false}
			if j, ok := back[k]; ok {
				next.Pending[j].Count += w.Count
				continue
			}
			w.Suspended = true
		}
		if w.Shrunk {
			k := groupKey{w.Job, w.Group, fmt.Sprint(w.Ask, w.Priority, w.Preemptible, w.Gang, w.MinCount), true}
			if j, ok := back[k]; ok {
				next.Pending[j].Count += w.Count
				next.Pending[j].Submit = min(next.Pending[j].Submit, w.Submit)
				continue
			}
		}
		next.Pending = append(next.Pending, w)
	}
	seq := map[int]int{}
	add := func(w int, node string, gpus []int) {
		wl := &snap.Pending[w]
		k := seq[w]
		seq[w]++
		next.Allocations = append(next.Allocations, cluster.Allocation{
			ID: fmt.Sprintf("%s/%s/%d@%d", wl.Job, wl.Group, k, now), Project: wl.Project, Job: wl.Job, Group: wl.Group,
			Priority: wl.Priority, Preemptible: wl.Preemptible, Ask: wl.Ask, Node: node, GPUs: gpus, Start: now,
			Gang: wl.Gang, MinCount: wl.MinCount,
		})
	}
	for _, a := range res.Actions {
		if a.Kind == Place {
			add(a.Workload, a.Node, a.GPUs)
		}
	}
	for _, g := range res.Grow {
		for _, pl := range g.Places {
			add(g.Workload, pl.Node, pl.GPUs)
		}
	}
	return next
}
