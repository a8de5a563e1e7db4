package soak

import (
	"fmt"
	"sort"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/gpushare/nomad-gpushare/vocab/nomadread"
)

// alloc is what the checker reads of one allocation.
type alloc struct {
	ID, Namespace, Job, Node string
	Desired, Client          string
	// Whole are the whole GPUs' UUIDs it was given, Shares its share
	// units by GPU UUID, Instances every gpushare instance ID.
	Whole     []string
	Shares    map[string]int
	Instances []string
}

func allocOf(a *nomadapi.AllocationListStub) alloc {
	out := alloc{ID: a.ID, Namespace: a.Namespace, Job: a.JobID, Node: a.NodeID, Desired: a.DesiredStatus, Client: a.ClientStatus}
	h := nomadread.HeldDevices(a.AllocatedResources)
	out.Whole, out.Shares = h.Whole, map[string]int{}
	for _, s := range h.Shares {
		out.Shares[s.UUID] = s.Units
	}
	if a.AllocatedResources != nil {
		for _, tr := range a.AllocatedResources.Tasks {
			if tr != nil {
				nomadread.Instances(tr.Devices, func(_ vocab.ID, raw string) { out.Instances = append(out.Instances, raw) })
			}
		}
	}
	return out
}

// booked says the allocation holds its devices in Nomad's books: Nomad
// wants it to run and it has not ended.
func (a alloc) booked() bool {
	return a.Desired == "run" && (a.Client == "pending" || a.Client == "running")
}

// gpus is how many GPUs the allocation holds: whole ones and shares in
// hundredths.
func (a alloc) gpus() float64 {
	n := float64(len(a.Whole))
	for _, u := range a.Shares {
		n += float64(u) / vocab.UnitsPerGPU
	}
	return n
}

// overbooking returns what breaks "no GPU is booked twice" among the
// booked allocations: an instance ID given to two allocations of a node,
// a GPU held whole by one allocation and whole or in shares by another,
// or more than a GPU's units in shares of one GPU.
func overbooking(allocs []alloc) []string {
	type gpu struct{ node, uuid string }
	instance := map[string]string{} // node/instance -> alloc
	whole := map[gpu][]string{}
	shared := map[gpu][]string{}
	units := map[gpu]int{}
	var out []string
	for _, a := range allocs {
		if !a.booked() {
			continue
		}
		for _, id := range a.Instances {
			k := a.Node + "/" + id
			if other, ok := instance[k]; ok && other != a.ID {
				out = append(out, fmt.Sprintf("instance %s on node %s given to %s and %s", id, short(a.Node), other, a.ID))
			}
			instance[k] = a.ID
		}
		for _, u := range a.Whole {
			whole[gpu{a.Node, u}] = append(whole[gpu{a.Node, u}], a.Namespace+"/"+a.Job+"/"+short(a.ID))
		}
		for u, n := range a.Shares {
			g := gpu{a.Node, u}
			shared[g] = append(shared[g], a.Namespace+"/"+a.Job+"/"+short(a.ID))
			units[g] += n
		}
	}
	for g, holders := range whole {
		if len(holders) > 1 {
			out = append(out, fmt.Sprintf("GPU %s on node %s held whole by %v", g.uuid, short(g.node), holders))
		}
		if s := shared[g]; len(s) > 0 {
			out = append(out, fmt.Sprintf("GPU %s on node %s held whole by %v and in shares by %v", g.uuid, short(g.node), holders, s))
		}
	}
	for g, n := range units {
		if n > vocab.UnitsPerGPU {
			out = append(out, fmt.Sprintf("GPU %s on node %s has %d share units booked by %v", g.uuid, short(g.node), n, shared[g]))
		}
	}
	sort.Strings(out)
	return out
}

// demand is one waiting workload of the restore check: a single
// allocation of one whole GPU or of shares.
type demand struct {
	Namespace, Job string
	Whole, Shares  int
}

func (d demand) gpus() float64 {
	return float64(d.Whole) + float64(d.Shares)/vocab.UnitsPerGPU
}

// placeable says whether d fits on some node once every allocation of
// a project that is not protected (projects above their guarantee may
// lose their work to a reclaim) is taken away: a whole GPU needs a GPU
// nobody protected holds, shares a GPU held by no protected whole
// allocation with room for them in shares. nodes maps each ready node
// to its GPUs' UUIDs.
func placeable(d demand, nodes map[string][]string, allocs []alloc, protected map[string]bool) bool {
	type gpu struct{ node, uuid string }
	whole := map[gpu]bool{}
	units := map[gpu]int{}
	for _, a := range allocs {
		if !a.booked() || !protected[a.Namespace] {
			continue
		}
		for _, u := range a.Whole {
			whole[gpu{a.Node, u}] = true
		}
		for u, n := range a.Shares {
			units[gpu{a.Node, u}] += n
		}
	}
	for node, uuids := range nodes {
		for _, u := range uuids {
			g := gpu{node, u}
			if whole[g] {
				continue
			}
			if d.Whole > 0 && units[g] == 0 || d.Whole == 0 && units[g]+d.Shares <= vocab.UnitsPerGPU {
				return true
			}
		}
	}
	return false
}

// starved returns the waiting workloads of a project that is under its
// guarantee by at least their size and that are placeable: the work the
// service owes the project. used is what the project's booked allocations
// hold, in GPUs.
func starved(guarantee, used float64, waiting []demand, nodes map[string][]string, allocs []alloc, protected map[string]bool) []demand {
	var out []demand
	for _, d := range waiting {
		if used+d.gpus() <= guarantee+1e-9 && placeable(d, nodes, allocs, protected) {
			out = append(out, d)
		}
	}
	return out
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
