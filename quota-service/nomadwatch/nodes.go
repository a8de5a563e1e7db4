package nomadwatch

import (
	"sort"
	"time"

	"github.com/gpushare/nomad-gpushare/device/ids"
	"github.com/gpushare/nomad-gpushare/scheduler/model"
	nomadapi "github.com/hashicorp/nomad/api"
)

// nodeGPUs is what Assemble tracks of one node with GPUs.
type nodeGPUs struct {
	id string
	// index maps a GPU UUID to its index on the node; free is what is
	// left of each GPU, in shares.
	index map[string]int
	free  []model.Shares
	// snap is the node's index in the snapshot's nodes; cpu and mem are
	// what the snapshot's allocations on it hold, otherCPU and otherMem
	// what the rest holds.
	snap               int
	cpu, mem           int64
	otherCPU, otherMem int64
}

// addNodes adds the ready nodes that publish GPUs of either device
// family, sorted by ID, each with its GPUs sorted by UUID.
func (a *assembler) addNodes() {
	sorted := append([]*nomadapi.NodeListStub(nil), a.in.Nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].ID < sorted[j].ID })
	for _, n := range sorted {
		if n.Status != "ready" || n.NodeResources == nil {
			continue
		}
		models := a.gpuModels(n)
		if len(models) == 0 {
			continue
		}
		uuids := make([]string, 0, len(models))
		for u := range models {
			uuids = append(uuids, u)
		}
		sort.Strings(uuids)
		ng := &nodeGPUs{id: n.ID, index: map[string]int{}, snap: len(a.snap.Nodes)}
		node := model.Node{Name: n.ID}
		node.CPUMilli, node.MemoryMiB = nodeCapacity(n)
		for i, u := range uuids {
			ng.index[u] = i
			ng.free = append(ng.free, model.SharesPerGPU)
			node.GPUs = append(node.GPUs, model.GPU{Model: models[u]})
		}
		a.nodes[n.ID] = ng
		a.nodeOrder = append(a.nodeOrder, ng)
		a.snap.Nodes = append(a.snap.Nodes, node)
	}
}

// gpuModels maps the UUID of every GPU the node publishes, in either
// device family, to its model name (the whole-GPU family's name wins).
func (a *assembler) gpuModels(n *nomadapi.NodeListStub) map[string]string {
	models := map[string]string{}
	for _, g := range n.NodeResources.Devices {
		if g == nil || g.Vendor != ids.Vendor || (g.Type != ids.TypeWhole && g.Type != ids.TypeShare) {
			continue
		}
		for _, inst := range g.Instances {
			id, err := ids.Parse(inst.ID)
			if err != nil {
				a.warn("node %s: %v", n.ID, err)
				continue
			}
			if _, ok := models[id.UUID]; !ok || g.Type == ids.TypeWhole {
				models[id.UUID] = g.Name
			}
		}
	}
	return models
}

// nodeCapacity is the node's CPU and memory less Nomad's reservation, or
// model.Unbounded when the node reports none.
func nodeCapacity(n *nomadapi.NodeListStub) (cpu, mem int64) {
	cpu, mem = n.NodeResources.Cpu.CpuShares, n.NodeResources.Memory.MemoryMB
	if cpu <= 0 || mem <= 0 {
		return model.Unbounded, model.Unbounded
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
	sort.Slice(allocs, func(i, j int) bool {
		if allocs[i].NodeID != allocs[j].NodeID {
			return allocs[i].NodeID < allocs[j].NodeID
		}
		return allocs[i].ID < allocs[j].ID
	})
	for _, al := range allocs {
		if al.DesiredStatus == "run" && (al.ClientStatus == "pending" || al.ClientStatus == "running") {
			a.addAllocation(al)
		}
	}
}

// addAllocation counts one live allocation. What it holds counts as the
// node's other use until it joins the snapshot.
func (a *assembler) addAllocation(al *nomadapi.AllocationListStub) {
	key := Key(al.Namespace, al.JobID)
	info := a.v.Jobs[key]
	if info != nil {
		info.Live++
		if al.ClientStatus == "running" {
			info.Running++
		}
	}
	if al.AllocatedResources == nil {
		return
	}
	cpu, mem := allocatedCPUMemory(al.AllocatedResources)
	ng := a.nodes[al.NodeID]
	if ng != nil {
		ng.otherCPU, ng.otherMem = ng.otherCPU+cpu, ng.otherMem+mem
	}
	held := ids.HeldDevices(al.AllocatedResources)
	if held.Empty() {
		return
	}
	if info == nil {
		a.warn("allocation %s: job %s not listed", al.ID, key)
		return
	}
	a.addProject(info.Project)
	if ng == nil {
		a.unaccounted("allocation %s: node %s has no GPUs listed", al.ID, al.NodeID)
		return
	}
	alloc := model.Allocation{ID: al.ID, Project: info.Project, Job: key, Group: al.TaskGroup, Priority: info.Priority,
		Preemptible: info.Preemptible, Node: al.NodeID, Start: al.CreateTime / int64(time.Second)}
	alloc.GPUs, alloc.Ask = a.bindGPUs(ng, al.ID, held)
	if len(alloc.GPUs) == 0 {
		return
	}
	alloc.Ask.CPUMilli, alloc.Ask.MemoryMiB = cpu, mem
	ng.otherCPU, ng.otherMem = ng.otherCPU-cpu, ng.otherMem-mem
	ng.cpu, ng.mem = ng.cpu+cpu, ng.mem+mem
	a.snap.Allocations = append(a.snap.Allocations, alloc)
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

// bindGPUs takes what allocation id holds from the node's free GPUs and
// returns the GPUs' indexes and the GPU part of its ask; GPUs unknown or
// already taken are reported unaccounted and left out.
func (a *assembler) bindGPUs(ng *nodeGPUs, id string, held ids.Held) ([]int, model.Ask) {
	if len(held.Whole) > 0 {
		if len(held.Shares) > 0 {
			a.warn("allocation %s holds whole GPUs and shares; counting the whole GPUs", id)
		}
		var gpus []int
		for _, u := range held.Whole {
			g, ok := ng.index[u]
			if !ok || ng.free[g] < model.SharesPerGPU {
				a.unaccounted("allocation %s: GPU %s unknown or already taken on node %s", id, u, ng.id)
				continue
			}
			ng.free[g] = 0
			gpus = append(gpus, g)
		}
		return gpus, model.Ask{WholeGPUs: len(gpus)}
	}
	uuids := held.ShareUUIDs()
	if len(uuids) > 1 {
		a.warn("allocation %s holds shares of %d GPUs; counting the first", id, len(uuids))
	}
	u := uuids[0]
	g, ok := ng.index[u]
	n := model.Shares(held.Shares[u])
	if !ok || ng.free[g] < n || n >= model.SharesPerGPU {
		a.unaccounted("allocation %s: %d shares of GPU %s do not fit on node %s", id, n, u, ng.id)
		return nil, model.Ask{}
	}
	ng.free[g] -= n
	return []int{g}, model.Ask{Shares: n}
}

// settleNodeResources takes what allocations outside the snapshot hold
// from each node's CPU and memory. Nomad never over-commits a node, but
// listings taken a moment apart might: a node's capacity never drops
// below what the snapshot's own allocations on it hold.
func (a *assembler) settleNodeResources() {
	for _, ng := range a.nodeOrder {
		node := &a.snap.Nodes[ng.snap]
		if node.CPUMilli == model.Unbounded {
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
