package plan

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// A job the plan suspends frees its GPUs some seconds before the work it
// makes room for lands there: the suspension stops it, the Nomad client
// reports it stopped, and a room of another device family first waits for
// the plugin's switch (docs/design.md, Partition protocol). Meanwhile the
// room is idle capacity in Nomad's eyes, and Nomad places its queued work
// there by itself, in its own order (evaluation priority, then age), not
// the plan's. Work placed so above its project's entitlement is reclaimed
// in the next cycle, which frees the room again for the next queued job:
// the soak saw a project under its guarantee wait more than a minute
// while six queued jobs took its room in turn, each suspended again at
// once. So the plan holds the queued jobs that could take such a room:
// a job with no allocation, queued in Nomad (not one the service
// suspended), that the plan leaves waiting and that fits on a node where
// the plan stops work, in the capacity Nomad shows there once that work
// has stopped and before anything the plan places there lands. It is
// suspended like any job (record, stop, tag), for no workload, and comes
// back when a plan places it.

// MaxHolds bounds the holds of one plan: they come before its other
// actions, and each costs the service a record and two Nomad writes, so a
// long queue must not delay the reclaim it guards by minutes. The queued
// jobs Nomad would place first (higher job priority, then older) are held
// first; the rest may take the room and be reclaimed, and the next plan
// that makes a room holds more.
const MaxHolds = 64

// HoldReason starts the reason of every suspension that holds queued work
// from a room the plan makes.
const HoldReason = "held from a room made for other work"

// guardRooms adds a Suspend action, before every other action, for each
// queued job that could take a room this plan makes (see above).
func (s *state) guardRooms() {
	rooms := s.madeRooms()
	if len(rooms.list) == 0 {
		return
	}
	fitsIn := map[shapeKey]int{}
	held := map[string]bool{}
	for _, w := range s.racers() {
		wl := &s.snap.Pending[w]
		if held[wl.Job] {
			continue
		}
		if len(s.plan.guards) == MaxHolds {
			return
		}
		t := s.cluster.task(wl.Ask)
		nodes := pendingNodes(s.index, w)
		key := shapeOf(t, nodes)
		r, known := fitsIn[key]
		if !known {
			r = rooms.fitting(t, nodes)
			fitsIn[key] = r
		}
		if r < 0 {
			continue
		}
		held[wl.Job] = true
		room := &rooms.list[r]
		s.plan.guards = append(s.plan.guards, Action{Kind: Suspend, Project: wl.Project, Job: wl.Job, Workload: -1, Cause: CauseHold,
			Reason: fmt.Sprintf("%s: Nomad could place it on %s, in the room this plan makes there %s; it comes back when a plan places it",
				HoldReason, room.node.Name, room.madeFor)})
	}
}

// racers are the pending workloads that may race for a room (mayRace), in
// the order Nomad places queued work: higher priority first, then older.
func (s *state) racers() []int {
	var out []int
	for w := range s.snap.Pending {
		if s.mayRace(w) {
			out = append(out, w)
		}
	}
	slices.SortStableFunc(out, func(a, b int) int {
		wa, wb := &s.snap.Pending[a], &s.snap.Pending[b]
		if c := cmp.Compare(wb.Priority, wa.Priority); c != 0 {
			return c
		}
		return cmp.Compare(wa.Submit, wb.Submit)
	})
	return out
}

// mayRace says whether pending workload w could be placed by Nomad
// itself in a room the plan makes: it leads its unit, needs GPUs, is
// queued in Nomad (not suspended by the service), is left waiting by the
// plan, and its job has no allocation (suspending it stops nothing).
func (s *state) mayRace(w int) bool {
	wl := &s.snap.Pending[w]
	if wl.Suspended || wl.Shrunk || wl.Ask.GPUShares() == 0 || s.plan.placed[w] || s.plan.never[w] || s.units.lead[w] != int32(w) {
		return false
	}
	_, runs := s.jobByKey[wl.Job]
	return !runs
}

// room is the capacity Nomad shows on one node once the work the plan
// stops there has stopped, before what the plan places there lands.
type room struct {
	index   int // the node's position in the snapshot
	node    placement.Node
	madeFor string
}

// madeRooms are the rooms of the nodes where the plan suspends or shrinks
// work, in node order.
type madeRooms struct {
	list    []room
	scratch placement.Cluster
}

// nodeOfStopped is the node (its position in the snapshot) of the running
// allocation id of job, or -1 when the snapshot runs no such allocation
// of the job: the job's own allocations are searched, not the snapshot.
func (s *state) nodeOfStopped(job, id string) int {
	j, ok := s.jobByKey[job]
	if !ok {
		return -1
	}
	for _, a := range s.jobs[j].allocs {
		if int(a) < len(s.snap.Allocations) && s.snap.Allocations[a].ID == id {
			return int(s.allocs.get(a).node)
		}
	}
	return -1
}

// madeRooms lists the rooms this plan makes (see guardRooms).
func (s *state) madeRooms() madeRooms {
	madeFor := map[int]string{}
	var nodes []int
	for i, act := range s.plan.actions {
		if (act.Kind != Suspend && act.Kind != Shrink) || s.plan.cancelled[int32(i)] {
			continue
		}
		for _, id := range act.Allocations {
			n := s.nodeOfStopped(act.Job, id)
			if _, seen := madeFor[n]; n < 0 || seen || s.snap.Nodes[n].Unavailable != "" {
				continue
			}
			nodes = append(nodes, n)
			madeFor[n] = "to hold a project to its limit"
			if act.Workload >= 0 {
				wl := &s.snap.Pending[act.Workload]
				madeFor[n] = "for " + wl.Job + "/" + wl.Group
			}
		}
	}
	if len(nodes) == 0 {
		return madeRooms{}
	}
	slices.Sort(nodes)
	rooms := madeRooms{list: make([]room, len(nodes)), scratch: placement.Cluster{Nodes: make([]placement.Node, 1)}}
	at := make(map[int]int, len(nodes))
	for i, n := range nodes {
		node := s.cluster.Nodes[n]
		node.GPUs = slices.Clone(node.GPUs)
		rooms.list[i] = room{index: n, node: node, madeFor: madeFor[n]}
		at[n] = i
	}
	for i, act := range s.plan.actions {
		if act.Kind != Place || s.plan.cancelled[int32(i)] || act.Workload < 0 {
			continue
		}
		r, ok := at[s.index.NodeByName[act.Node]]
		if !ok || act.Node == "" {
			continue
		}
		rooms.scratch.Nodes[0] = rooms.list[r].node
		rooms.scratch.Release(placement.Choice{Node: 0, GPUs: act.GPUs}, s.cluster.task(s.snap.Pending[act.Workload].Ask))
		rooms.list[r].node = rooms.scratch.Nodes[0]
	}
	return rooms
}

// fitting returns the first room that a task of shape t, which may run
// on nodes, fits in, or -1.
func (m *madeRooms) fitting(t placement.Task, nodes nodeSet) int {
	for i := range m.list {
		if !nodes.has(m.list[i].index) {
			continue
		}
		m.scratch.Nodes[0] = m.list[i].node
		if _, ok := m.scratch.Fits(0, t); ok {
			return i
		}
	}
	return -1
}
