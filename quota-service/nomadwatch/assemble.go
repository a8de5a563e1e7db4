// Package nomadwatch builds the planner's model.Snapshot from Nomad and
// tells the service when to plan again.
//
// Build lists nodes (with their device resources), allocations (with their
// allocated device IDs) and jobs (with their summaries) in all namespaces,
// and assembles a View: the snapshot plus what the actuator needs to act on
// it (job versions, group counts). Only GPU work counts: a node's GPUs are
// the physical GPUs named by its "nvidia/gpu" and "nvidia/gpu-share" device
// instances (package device/ids), an allocation's usage is the whole GPUs
// and shares it was given, and pending demand is the queued count of each
// task group times its device asks ("nvidia/gpu" count = whole GPUs,
// "nvidia/gpu-share" count = shares of one GPU). CPU-only work is left out
// of the demand, but it counts against its node: a node's CPU and memory
// in the snapshot are its capacity less Nomad's reserved resources and
// less what allocations outside the snapshot hold, and GPU allocations and
// pending groups carry their tasks' CPU and memory asks, so the planner
// never counts on a node that lacks CPU or memory. CPU is in Nomad's
// units (MHz) throughout; the model's CPUMilli only needs one unit.
//
// Watch follows Nomad's event stream (Job, Allocation, Evaluation and Node
// topics) and signals a re-plan on every change and after every reconnect,
// since the stream's buffer may have dropped events in the gap.
package nomadwatch

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/device/ids"
	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/model"
	nomadapi "github.com/hashicorp/nomad/api"
)

const (
	// MetaPreempt is the job meta key that opts a job out of suspension
	// ("false").
	MetaPreempt = "gpushare.preemptible"
)

// JobInfo is what the actuator needs to know about one job.
type JobInfo struct {
	Namespace      string
	ID             string
	Project        string
	Priority       int
	Version        uint64
	JobModifyIndex uint64
	Stop           bool
	Status         string
	Preemptible    bool
	Groups         map[string]int
	// Running is the number of its allocations that run.
	Running int
	// Live is the number of its allocations placed and not finished
	// (desired to run, client status pending or running).
	Live int
	// Queued is the number of its allocations waiting for placement.
	Queued int
}

// Key is the job's snapshot name, "namespace/id".
func Key(namespace, id string) string { return namespace + "/" + id }

// View is one consistent reading of Nomad.
type View struct {
	Snapshot *model.Snapshot
	// Jobs by Key.
	Jobs map[string]*JobInfo
	// Suspended are the records whose job is stopped in Nomad (they are
	// in Snapshot.Pending, Suspended set).
	Suspended map[string]state.Suspension
	// Unfinished are records whose job still runs and is not marked
	// stopped: a suspension to finish.
	Unfinished []state.Suspension
	// Stale are records whose job runs again or is gone: to delete.
	Stale []state.Suspension
	// Warnings are things left out of the snapshot, for logs.
	Warnings []string
	// Unaccounted names running GPU allocations the snapshot could not
	// place on a node's GPUs (the node is not ready, or its GPUs are not
	// published as the allocation holds them). Nomad shows this for a
	// while after an agent restart or while a node reconnects; a view
	// with such allocations undercounts usage and must not be acted on.
	Unaccounted []string
	ListedAt    time.Time
}

// Inputs are the raw listings Assemble works on.
type Inputs struct {
	Nodes       []*nomadapi.NodeListStub
	Allocations []*nomadapi.AllocationListStub
	Jobs        []*nomadapi.JobListStub
	// Specs are full job specs by Key, for jobs with queued work and
	// for suspended jobs.
	Specs       map[string]*nomadapi.Job
	Settings    []quota.Settings
	Suspensions []state.Suspension
	Now         time.Time
}

// projectResolver maps jobs to projects.
type projectResolver struct {
	byNamespace map[string]string
	// metaKeys maps a job meta key to the projects that declared it.
	metaKeys map[string]map[string]bool
}

// newResolver builds the mapping from the quota settings in force.
func newResolver(settings []quota.Settings) *projectResolver {
	r := &projectResolver{byNamespace: map[string]string{}, metaKeys: map[string]map[string]bool{}}
	for _, s := range settings {
		if _, taken := r.byNamespace[s.Namespace]; !taken || s.Project == s.Namespace {
			r.byNamespace[s.Namespace] = s.Project
		}
		if s.JobMetaKey != "" {
			if r.metaKeys[s.JobMetaKey] == nil {
				r.metaKeys[s.JobMetaKey] = map[string]bool{}
			}
			r.metaKeys[s.JobMetaKey][s.Project] = true
		}
	}
	return r
}

// Project returns the project of a job: a project named by a declared meta
// key, else the project mapping its namespace, else the namespace itself.
func (r *projectResolver) Project(namespace string, meta map[string]string) string {
	keys := make([]string, 0, len(r.metaKeys))
	for k := range r.metaKeys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v, ok := meta[k]; ok && r.metaKeys[k][v] {
			return v
		}
	}
	if p, ok := r.byNamespace[namespace]; ok {
		return p
	}
	return namespace
}

// groupAsk is the GPU ask of one instance of a task group, with its CPU
// and memory, summed over its tasks; ok is false for CPU-only groups.
func groupAsk(tg *nomadapi.TaskGroup) (ask model.Ask, ok bool, err error) {
	for _, task := range tg.Tasks {
		if task.Resources == nil {
			continue
		}
		if task.Resources.CPU != nil {
			ask.CPUMilli += int64(*task.Resources.CPU)
		}
		if task.Resources.MemoryMB != nil {
			ask.MemoryMiB += int64(*task.Resources.MemoryMB)
		}
		for _, d := range task.Resources.Devices {
			if d == nil {
				continue
			}
			req := ids.ParseRequest(d)
			switch {
			case req.Whole():
				ask.WholeGPUs += req.Count
			case req.Share():
				ask.Shares += model.Shares(req.Count)
			default:
				continue
			}
			if req.Name != "" {
				ask.Models = append(ask.Models, req.Name)
			}
			ok = true
		}
	}
	if ok {
		if verr := ask.Validate(); verr != nil {
			return model.Ask{}, false, fmt.Errorf("group %q: %w", *tg.Name, verr)
		}
	}
	return ask, ok, nil
}

func jobPreemptible(meta map[string]string) bool {
	return !strings.EqualFold(strings.TrimSpace(meta[MetaPreempt]), "false")
}

// Assemble turns listings into a View. It never fails: records it cannot
// use are left out with a warning.
func Assemble(in Inputs) *View {
	v := &View{Snapshot: &model.Snapshot{}, Jobs: map[string]*JobInfo{}, Suspended: map[string]state.Suspension{}, ListedAt: in.Now}
	snap := v.Snapshot
	resolver := newResolver(in.Settings)
	projects := map[string]bool{}
	for _, s := range in.Settings {
		snap.Projects = append(snap.Projects, s.Model())
		projects[s.Project] = true
	}
	addProject := func(name string) {
		if !projects[name] {
			projects[name] = true
			snap.Projects = append(snap.Projects, model.Project{Name: name})
		}
	}

	// Nodes: the GPUs named by either device family, sorted by UUID.
	type nodeGPUs struct {
		index map[string]int
		free  []model.Shares
		// snap is the node's index in snap.Nodes; cpu and mem are what
		// the snapshot's allocations on it hold, other what the rest
		// holds.
		snap               int
		cpu, mem           int64
		otherCPU, otherMem int64
	}
	nodes := map[string]*nodeGPUs{}
	sortedNodes := append([]*nomadapi.NodeListStub(nil), in.Nodes...)
	sort.Slice(sortedNodes, func(i, j int) bool { return sortedNodes[i].ID < sortedNodes[j].ID })
	for _, n := range sortedNodes {
		if n.Status != "ready" || n.NodeResources == nil {
			continue
		}
		models := map[string]string{}
		for _, g := range n.NodeResources.Devices {
			if g == nil || g.Vendor != ids.Vendor || (g.Type != ids.TypeWhole && g.Type != ids.TypeShare) {
				continue
			}
			for _, inst := range g.Instances {
				id, err := ids.Parse(inst.ID)
				if err != nil {
					v.Warnings = append(v.Warnings, fmt.Sprintf("node %s: %v", n.ID, err))
					continue
				}
				if _, ok := models[id.UUID]; !ok || g.Type == ids.TypeWhole {
					models[id.UUID] = g.Name
				}
			}
		}
		if len(models) == 0 {
			continue
		}
		uuids := make([]string, 0, len(models))
		for u := range models {
			uuids = append(uuids, u)
		}
		sort.Strings(uuids)
		ng := &nodeGPUs{index: map[string]int{}, snap: len(snap.Nodes)}
		node := model.Node{Name: n.ID, CPUMilli: model.Unbounded, MemoryMiB: model.Unbounded}
		if cpu, mem := n.NodeResources.Cpu.CpuShares, n.NodeResources.Memory.MemoryMB; cpu > 0 && mem > 0 {
			if r := n.ReservedResources; r != nil {
				cpu -= int64(r.Cpu.CpuShares)
				mem -= int64(r.Memory.MemoryMB)
			}
			node.CPUMilli, node.MemoryMiB = max(cpu, 0), max(mem, 0)
		}
		for i, u := range uuids {
			ng.index[u] = i
			ng.free = append(ng.free, model.SharesPerGPU)
			node.GPUs = append(node.GPUs, model.GPU{Model: models[u]})
		}
		nodes[n.ID] = ng
		snap.Nodes = append(snap.Nodes, node)
	}

	// Jobs.
	for _, j := range in.Jobs {
		if j.ParameterizedJob || j.Periodic {
			continue
		}
		info := &JobInfo{Namespace: j.Namespace, ID: j.ID, Priority: j.Priority, JobModifyIndex: j.JobModifyIndex,
			Stop: j.Stop, Status: j.Status, Preemptible: jobPreemptible(j.Meta), Groups: map[string]int{},
			Project: resolver.Project(j.Namespace, j.Meta)}
		if spec := in.Specs[Key(j.Namespace, j.ID)]; spec != nil {
			if spec.Version != nil {
				info.Version = *spec.Version
			}
			for _, tg := range spec.TaskGroups {
				if tg.Name != nil && tg.Count != nil {
					info.Groups[*tg.Name] = *tg.Count
				}
			}
		}
		v.Jobs[Key(j.Namespace, j.ID)] = info
	}

	// Allocations that hold GPUs.
	allocs := append([]*nomadapi.AllocationListStub(nil), in.Allocations...)
	sort.Slice(allocs, func(i, j int) bool {
		if allocs[i].NodeID != allocs[j].NodeID {
			return allocs[i].NodeID < allocs[j].NodeID
		}
		return allocs[i].ID < allocs[j].ID
	})
	for _, a := range allocs {
		if a.DesiredStatus != "run" || (a.ClientStatus != "pending" && a.ClientStatus != "running") {
			continue
		}
		key := Key(a.Namespace, a.JobID)
		info := v.Jobs[key]
		if info != nil {
			info.Live++
			if a.ClientStatus == "running" {
				info.Running++
			}
		}
		if a.AllocatedResources == nil {
			continue
		}
		var cpu, mem int64
		for _, tr := range a.AllocatedResources.Tasks {
			if tr != nil {
				cpu += tr.Cpu.CpuShares
				mem += tr.Memory.MemoryMB
			}
		}
		if ng := nodes[a.NodeID]; ng != nil {
			// Counted as the rest's until it joins the snapshot.
			ng.otherCPU, ng.otherMem = ng.otherCPU+cpu, ng.otherMem+mem
		}
		held := ids.HeldDevices(a.AllocatedResources)
		if held.Empty() {
			continue
		}
		if info == nil {
			v.Warnings = append(v.Warnings, fmt.Sprintf("allocation %s: job %s not listed", a.ID, key))
			continue
		}
		addProject(info.Project)
		alloc := model.Allocation{ID: a.ID, Project: info.Project, Job: key, Group: a.TaskGroup, Priority: info.Priority,
			Preemptible: info.Preemptible, Node: a.NodeID, Start: a.CreateTime / int64(time.Second)}
		ng := nodes[a.NodeID]
		if ng == nil {
			v.unaccounted(fmt.Sprintf("allocation %s: node %s has no GPUs listed", a.ID, a.NodeID))
			continue
		}
		switch {
		case len(held.Whole) > 0:
			if len(held.Shares) > 0 {
				v.Warnings = append(v.Warnings, fmt.Sprintf("allocation %s holds whole GPUs and shares; counting the whole GPUs", a.ID))
			}
			for _, u := range held.Whole {
				g, ok := ng.index[u]
				if !ok || ng.free[g] < model.SharesPerGPU {
					v.unaccounted(fmt.Sprintf("allocation %s: GPU %s unknown or already taken on node %s", a.ID, u, a.NodeID))
					continue
				}
				ng.free[g] = 0
				alloc.GPUs = append(alloc.GPUs, g)
			}
			alloc.Ask.WholeGPUs = len(alloc.GPUs)
		default:
			uuids := held.ShareUUIDs()
			if len(uuids) > 1 {
				v.Warnings = append(v.Warnings, fmt.Sprintf("allocation %s holds shares of %d GPUs; counting the first", a.ID, len(uuids)))
			}
			u := uuids[0]
			g, ok := ng.index[u]
			n := model.Shares(held.Shares[u])
			if !ok || ng.free[g] < n || n >= model.SharesPerGPU {
				v.unaccounted(fmt.Sprintf("allocation %s: %d shares of GPU %s do not fit on node %s", a.ID, n, u, a.NodeID))
				continue
			}
			ng.free[g] -= n
			alloc.GPUs = []int{g}
			alloc.Ask.Shares = n
		}
		if len(alloc.GPUs) == 0 {
			continue
		}
		alloc.Ask.CPUMilli, alloc.Ask.MemoryMiB = cpu, mem
		ng.otherCPU, ng.otherMem = ng.otherCPU-cpu, ng.otherMem-mem
		ng.cpu, ng.mem = ng.cpu+cpu, ng.mem+mem
		snap.Allocations = append(snap.Allocations, alloc)
	}
	// What allocations outside the snapshot hold is not free; what
	// Nomad placed never over-commits a node, but listings taken a moment
	// apart might: the capacity never drops below the snapshot's own use.
	for id, ng := range nodes {
		node := &snap.Nodes[ng.snap]
		if node.CPUMilli == model.Unbounded {
			continue
		}
		cpu, mem := node.CPUMilli-ng.otherCPU, node.MemoryMiB-ng.otherMem
		if cpu < ng.cpu || mem < ng.mem {
			v.Warnings = append(v.Warnings, fmt.Sprintf("node %s: allocations hold more CPU or memory than it has; counting it full", id))
			cpu, mem = max(cpu, ng.cpu), max(mem, ng.mem)
		}
		node.CPUMilli, node.MemoryMiB = cpu, mem
	}

	// Suspension records.

	for _, rec := range in.Suspensions {
		key := Key(rec.Namespace, rec.Job)
		info := v.Jobs[key]
		switch {
		case info == nil:
			v.Stale = append(v.Stale, rec)
		case !info.Stop && !rec.Stopped:
			v.Unfinished = append(v.Unfinished, rec)
		case !info.Stop && (info.Running > 0 || info.Status == "dead"):
			v.Stale = append(v.Stale, rec) // running again (resumed, or started by hand), or done
		case !info.Stop:
			// Registered again, not running yet: the record stays
			// until the job runs.
		default:
			v.Suspended[key] = rec
		}
	}

	// Pending demand: queued groups of live jobs, and suspended jobs.
	jobKeys := make([]string, 0, len(v.Jobs))
	for k := range v.Jobs {
		jobKeys = append(jobKeys, k)
	}
	sort.Strings(jobKeys)
	stubs := map[string]*nomadapi.JobListStub{}
	for _, j := range in.Jobs {
		stubs[Key(j.Namespace, j.ID)] = j
	}
	for _, key := range jobKeys {
		info := v.Jobs[key]
		stub := stubs[key]
		spec := in.Specs[key]
		rec, suspended := v.Suspended[key]
		if spec == nil {
			continue
		}
		for _, tg := range spec.TaskGroups {
			if tg.Name == nil {
				continue
			}
			ask, ok, err := groupAsk(tg)
			if err != nil {
				v.Warnings = append(v.Warnings, fmt.Sprintf("job %s: %v", key, err))
				continue
			}
			if !ok {
				continue
			}
			count := 0
			submit := stub.SubmitTime / int64(time.Second)
			switch {
			case suspended:
				count = rec.Groups[*tg.Name]
				submit = rec.Time.Unix()
			case !info.Stop && stub.JobSummary != nil:
				if s, ok := stub.JobSummary.Summary[*tg.Name]; ok {
					count = s.Queued
				}
			}
			if count <= 0 {
				continue
			}
			info.Queued += count
			addProject(info.Project)
			snap.Pending = append(snap.Pending, model.Pending{Project: info.Project, Job: key, Group: *tg.Name,
				Priority: info.Priority, Preemptible: info.Preemptible, Ask: ask, Count: count, Submit: submit, Suspended: suspended})
		}
	}
	sort.Slice(snap.Projects, func(i, j int) bool { return snap.Projects[i].Name < snap.Projects[j].Name })
	return v
}

// unaccounted records a running GPU allocation left out of the snapshot.
func (v *View) unaccounted(msg string) {
	v.Warnings = append(v.Warnings, msg)
	v.Unaccounted = append(v.Unaccounted, msg)
}
