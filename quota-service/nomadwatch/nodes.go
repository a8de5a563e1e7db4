package nomadwatch

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/vocab"
	nomadapi "github.com/hashicorp/nomad/api"
)

// nodeGPUs is what Assemble tracks of one node in the snapshot.
type nodeGPUs struct {
	id string
	// index maps a GPU UUID to its index on the node; free is what is
	// left of each GPU, in shares. mig is the part of its GPU each MIG
	// device of the node is, by UUID (see migShares).
	index map[string]int
	free  []cluster.Shares
	mig   map[string]cluster.Shares
	// snap is the node's index in the snapshot's nodes; cpu and mem are
	// what the snapshot's allocations on it hold, otherCPU and otherMem
	// what the rest holds.
	snap               int
	cpu, mem           int64
	otherCPU, otherMem int64
}

// addNodes adds the nodes that publish GPUs of either device family,
// whatever their status, sorted by ID, each with its GPUs sorted by UUID.
// A node Nomad will not place work on (not ready, ineligible, draining) is
// in the snapshot, unavailable with the reason, so that the work it runs
// still counts (docs/design.md, Projects and fair share); a GPU withdrawn
// for a hardware reason is unavailable too (see gpuHealth).
func (a *assembler) addNodes() {
	sorted := append([]*nomadapi.NodeListStub(nil), a.in.Nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	for _, n := range sorted {
		if n.NodeResources == nil {
			continue
		}
		dev := a.devicesOf(n)
		for _, w := range dev.warnings {
			a.warn("node %s: %s", n.ID, w)
		}
		if len(dev.gpus) == 0 {
			continue
		}
		ng := a.newNode(n.ID, nodeUnavailable(n))
		node := &a.snap.Nodes[ng.snap]
		node.CPUMilli, node.MemoryMiB = nodeCapacity(n)
		for i, gpu := range dev.gpus {
			h := gpu.health
			g := cluster.GPU{ID: gpu.uuid, Model: h.model, Unavailable: h.unavailable()}
			if h.mig > 0 {
				g.Mode, g.Shares = cluster.ModeMIG, h.mig
				ng.mig[gpu.uuid] = h.mig
			}
			ng.index[gpu.uuid] = i
			ng.free = append(ng.free, g.Capacity())
			node.GPUs = append(node.GPUs, g)
		}
	}
}

// devicesOf is what node n's device inventory holds: as the cache read it
// (Inputs.Devices), or read from the stub.
func (a *assembler) devicesOf(n *nomadapi.NodeListStub) *nodeDevices {
	if d := a.in.Devices[n.ID]; d != nil {
		return d
	}
	if d := a.readDevs[n.ID]; d != nil {
		return d
	}
	d := readDevices(n.NodeResources.Devices)
	a.readDevs[n.ID] = d
	return d
}

// newNode adds a node without GPUs to the snapshot and the tables.
func (a *assembler) newNode(id, unavailable string) *nodeGPUs {
	ng := &nodeGPUs{id: id, index: map[string]int{}, mig: map[string]cluster.Shares{}, snap: len(a.snap.Nodes)}
	a.nodes[id] = ng
	a.nodeOrder = append(a.nodeOrder, ng)
	a.snap.Nodes = append(a.snap.Nodes, cluster.Node{Name: id, CPUMilli: cluster.Unbounded, MemoryMiB: cluster.Unbounded, Unavailable: unavailable})
	return ng
}

// nodeUnavailable says why Nomad places no new work on the node, or "".
func nodeUnavailable(n *nomadapi.NodeListStub) string {
	switch {
	case n.Status != "ready":
		return fmt.Sprintf("node is %s", n.Status)
	case n.Drain:
		return "node is draining"
	case n.SchedulingEligibility == "ineligible":
		return "node is ineligible for scheduling"
	}
	return ""
}

// gpuSlicesAssumed is the number of compute slices assumed of a MIG-enabled
// GPU when its MIG group does not say what part of it a device is: seven,
// as on the A100 and H100 (an A30 has four, so its MIG devices count less
// than they are, never more).
const gpuSlicesAssumed = 7

// migShares is the part of its GPU one device of group g is when g lists
// MIG devices (its vocab.SharingAttr is vocab.SharingMIG, or it names a MIG
// profile), or 0 for a group of whole GPUs or shares. It is the group's
// vocab.MIGSharesAttr, which the gpushare plugin publishes; for another
// plugin's MIG group, the slices of its profile (attribute mig_profile, or
// the end of the group name, "... MIG 1g.10gb") over gpuSlicesAssumed;
// failing both, one whole GPU, with a warning (docs/design.md, Units and
// device families).
func migShares(g *nomadapi.NodeDeviceResource) (cluster.Shares, string) {
	if g.Type != vocab.TypeWhole {
		return 0, ""
	}
	profile := attrString(g.Attributes["mig_profile"])
	if _, after, ok := strings.Cut(g.Name, " MIG "); ok && profile == "" {
		profile = strings.TrimSpace(after)
	}
	if attrString(g.Attributes[vocab.SharingAttr]) != vocab.SharingMIG && profile == "" {
		return 0, ""
	}
	if a := g.Attributes[vocab.MIGSharesAttr]; a != nil && a.IntVal != nil && *a.IntVal > 0 && *a.IntVal <= cluster.SharesPerGPU {
		return cluster.Shares(*a.IntVal), ""
	}
	if s := vocab.MIGShares(vocab.MIGProfileSlices(profile), gpuSlicesAssumed); s > 0 {
		return cluster.Shares(s), ""
	}
	return cluster.SharesPerGPU, fmt.Sprintf("MIG device group %q says neither %s nor a MIG profile: each of its devices counts as one GPU", g.Name, vocab.MIGSharesAttr)
}

// attrString is a device attribute's string value, or "".
func attrString(a *nomadapi.Attribute) string {
	if a == nil || a.StringVal == nil {
		return ""
	}
	return *a.StringVal
}

// nodeCapacity is the node's CPU and memory less Nomad's reservation, or
// cluster.Unbounded when the node reports none.
func nodeCapacity(n *nomadapi.NodeListStub) (cpu, mem int64) {
	cpu, mem = n.NodeResources.Cpu.CpuShares, n.NodeResources.Memory.MemoryMB
	if cpu <= 0 || mem <= 0 {
		return cluster.Unbounded, cluster.Unbounded
	}
	if r := n.ReservedResources; r != nil {
		cpu -= int64(r.Cpu.CpuShares)
		mem -= int64(r.Memory.MemoryMB)
	}
	return max(cpu, 0), max(mem, 0)
}

// addAllocations counts every live allocation against its job and node,
// and adds those that hold GPUs to the snapshot, bound to the node's GPUs.
func (a *assembler) addAllocations() {
	allocs := append([]*nomadapi.AllocationListStub(nil), a.in.Allocations...)
	byNode := func(x, y *nomadapi.AllocationListStub) int { return compareAllocRefs(refOf(x), refOf(y)) }
	if !slices.IsSortedFunc(allocs, byNode) { // the cache gives them in order
		slices.SortFunc(allocs, byNode)
	}
	// Most allocations hold one part (parts: bindGPUs); growing a slice
	// of a hundred thousand allocations is most of what a cycle allocates.
	a.snap.Allocations = make([]cluster.Allocation, 0, len(allocs)+len(allocs)/8)
	for _, al := range allocs {
		if al.DesiredStatus == "run" && (al.ClientStatus == "pending" || al.ClientStatus == "running") {
			a.addAllocation(al)
		}
	}
}

// addAllocation counts one live allocation. What it holds counts as the
// node's other use until it joins the snapshot.
func (a *assembler) addAllocation(al *nomadapi.AllocationListStub) {
	key := a.jobKey(al.Namespace, al.JobID)
	info := a.v.Jobs[key]
	if info != nil {
		info.Live++
		if al.ClientStatus == "running" {
			info.Running++
		}
	}
	res := a.resourcesOf(al)
	if res == nil || (info != nil && info.Stop) {
		// Without resources it holds nothing we count; of a stopped
		// job, it is being stopped and Nomad frees what it holds
		// (docs/design.md, Suspension and resumption: a stop in flight
		// is no usage to make room from).
		return
	}
	cpu, mem := res.cpu, res.mem
	ng := a.nodes[al.NodeID]
	if ng != nil {
		ng.otherCPU, ng.otherMem = ng.otherCPU+cpu, ng.otherMem+mem
	}
	held := res.held
	if held.Empty() {
		return
	}

	if info == nil {
		a.warn("allocation %s: job %s not listed", al.ID, key)
		return
	}
	a.addProject(info.Project)
	if ng == nil {
		// A node that publishes no GPUs (yet) or is not listed: its
		// allocations count, but nothing is planned there.
		ng = a.newNode(al.NodeID, "")
		a.outOfPlanning(ng, "allocation %s holds GPUs the node does not publish", al.ID)
	}
	// Node is the node's own name string, not the allocation's copy of
	// it: the planner compares an allocation's node with the last one,
	// 100,000 times a cycle at 5,000 nodes, and equal strings that share
	// their bytes compare at once (a third of cluster.Snapshot.Index's
	// time before).
	base := cluster.Allocation{ID: al.ID, Project: info.Project, Job: key, Group: al.TaskGroup, Priority: info.Priority,
		Preemptible: info.Preemptible, System: info.System(), Gang: info.Gang, MinCount: info.MinCounts[al.TaskGroup],
		Instance: instanceOf(al.Name), Node: ng.id, Start: al.CreateTime / int64(time.Second),
		InMinRuntime: info.MinRuntime > 0 && a.in.Now.Sub(time.Unix(0, al.CreateTime)) < info.MinRuntime,
		Movable:      info.Movable && a.in.Now.Sub(time.Unix(0, al.CreateTime)) >= info.MoveCooldown}
	if base.MinCount > 0 {
		a.noteVersion(al.ID, al.JobVersion)
	}
	for i, part := range a.bindGPUs(ng, al.ID, held) {
		alloc := base
		alloc.Ask, alloc.GPUs = part.ask, part.gpus
		if i == 0 {
			alloc.Ask.CPUMilli, alloc.Ask.MemoryMiB = cpu, mem
		}
		a.snap.Allocations = append(a.snap.Allocations, alloc)
	}
	ng.otherCPU, ng.otherMem = ng.otherCPU-cpu, ng.otherMem-mem
	ng.cpu, ng.mem = ng.cpu+cpu, ng.mem+mem
}

// resourcesOf is what allocation al holds: as the cache read it
// (Inputs.AllocResources), or read from the stub; nil when it holds
// nothing.
func (a *assembler) resourcesOf(al *nomadapi.AllocationListStub) *allocResources {
	if r, ok := a.in.AllocResources[al.ID]; ok {
		return r
	}
	return readAllocResources(al.AllocatedResources)
}

// outOfPlanning makes node ng unavailable because of an allocation the
// snapshot cannot account for; the first reason is kept.
func (a *assembler) outOfPlanning(ng *nodeGPUs, format string, args ...any) {
	node := &a.snap.Nodes[ng.snap]
	msg := fmt.Sprintf(format, args...)
	if node.Unavailable == "" {
		node.Unavailable = msg
	}
	a.warn("node %s out of planning: %s", ng.id, msg)
}

// allocatedCPUMemory sums the CPU and memory of an allocation's tasks.
func allocatedCPUMemory(r *nomadapi.AllocatedResources) (cpu, mem int64) {
	for _, tr := range r.Tasks {
		if tr != nil {
			cpu += tr.Cpu.CpuShares
			mem += tr.Memory.MemoryMB
		}
	}
	return cpu, mem
}

// part is one shape of what an allocation holds: whole GPUs, or shares of
// one GPU (a full GPU's worth of shares counts as a whole GPU).
type part struct {
	ask  cluster.Ask
	gpus []int
}

// bindGPUs takes what allocation id holds from the node's free GPUs,
// wherever it lands (docs/design.md, Units and device families): its whole
// GPUs as one part, and the shares it holds of each GPU as one part per
// GPU. A GPU the node does not publish, or one held beyond its capacity,
// takes the node out of planning; the part still counts, unbound.
func (a *assembler) bindGPUs(ng *nodeGPUs, id string, held vocab.Held) []part {
	var parts []part
	var whole []string
	for _, u := range held.Whole {
		if n, ok := ng.mig[u]; ok {
			parts = append(parts, a.bindMIG(ng, id, u, n))
		} else {
			whole = append(whole, u)
		}
	}
	if len(whole) > 0 {
		p := part{ask: cluster.Ask{WholeGPUs: len(whole)}}
		for _, u := range whole {
			if g, ok := a.take(ng, id, u, cluster.SharesPerGPU); ok {
				p.gpus = append(p.gpus, g)
			}
		}
		if len(p.gpus) != len(whole) {
			p.gpus = nil
		}
		parts = append(parts, p)
	}
	for _, s := range held.Shares {
		u, n := s.UUID, cluster.Shares(s.Units)
		p := part{ask: cluster.Ask{Shares: n}}
		if n == cluster.SharesPerGPU {
			p.ask = cluster.Ask{WholeGPUs: 1}
		}
		if n > cluster.SharesPerGPU {
			a.outOfPlanning(ng, "allocation %s holds %d shares of GPU %s, more than one GPU has", id, n, u)
			p.ask = cluster.Ask{WholeGPUs: int(n+cluster.SharesPerGPU-1) / cluster.SharesPerGPU}
		} else if g, ok := a.take(ng, id, u, n); ok {
			p.gpus = []int{g}
		}
		parts = append(parts, p)
	}
	return parts
}

// bindMIG is the part of allocation id that is MIG device u, n shares of
// its GPU: it counts n, not a whole GPU.
func (a *assembler) bindMIG(ng *nodeGPUs, id, u string, n cluster.Shares) part {
	p := part{ask: cluster.Ask{Shares: n}}
	if n == cluster.SharesPerGPU {
		p.ask = cluster.Ask{WholeGPUs: 1}
	}
	if g, ok := a.take(ng, id, u, n); ok {
		p.gpus = []int{g}
	}
	return p
}

// take takes n shares of GPU u on node ng for allocation id and returns
// the GPU's index; a GPU the node does not publish or that has less than n
// free takes the node out of planning.
func (a *assembler) take(ng *nodeGPUs, id, u string, n cluster.Shares) (int, bool) {
	g, ok := ng.index[u]
	switch {
	case !ok:
		a.outOfPlanning(ng, "allocation %s holds GPU %s, which the node does not publish", id, u)
		return 0, false
	case ng.free[g] < n:
		a.outOfPlanning(ng, "allocation %s holds %s of GPU %s, which has only %s left by other allocations", id, n, u, ng.free[g])
		return 0, false
	}
	ng.free[g] -= n
	return g, true
}

// settleNodeResources takes what allocations outside the snapshot hold
// from each node's CPU and memory. Nomad never over-commits a node, but
// listings taken a moment apart might: a node's capacity never drops
// below what the snapshot's own allocations on it hold.
func (a *assembler) settleNodeResources() {
	for _, ng := range a.nodeOrder {
		node := &a.snap.Nodes[ng.snap]
		if node.CPUMilli == cluster.Unbounded {
			continue
		}
		cpu, mem := node.CPUMilli-ng.otherCPU, node.MemoryMiB-ng.otherMem
		if cpu < ng.cpu || mem < ng.mem {
			a.warn("node %s: allocations hold more CPU or memory than it has; counting it full", ng.id)
			cpu, mem = max(cpu, ng.cpu), max(mem, ng.mem)
		}
		node.CPUMilli, node.MemoryMiB = cpu, mem
	}
}
