package nomadwatch

import (
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	"github.com/gpushare/nomad-gpushare/vocab"
	nomadapi "github.com/hashicorp/nomad/api"
)

func ptr[T any](v T) *T { return &v }

// node publishes 4 GPUs: GPU-a and GPU-b as whole GPUs, GPU-c and GPU-d in
// shares (one share group per GPU, as the plugin does).
func node() *nomadapi.NodeListStub {
	whole := &nomadapi.NodeDeviceResource{Vendor: "nvidia", Type: "gpu", Name: "A100"}
	for _, u := range []string{"GPU-b", "GPU-a"} {
		whole.Instances = append(whole.Instances, &nomadapi.NodeDevice{ID: u, Healthy: true})
	}
	devs := []*nomadapi.NodeDeviceResource{whole}
	for _, u := range []string{"GPU-c", "GPU-d"} {
		g := &nomadapi.NodeDeviceResource{Vendor: "nvidia", Type: "gpu-share", Name: "A100-" + u}
		for k := 0; k < vocab.DefaultSharesPerGPU; k++ {
			g.Instances = append(g.Instances, &nomadapi.NodeDevice{ID: vocab.Share(u, k), Healthy: true})
		}
		devs = append(devs, g)
	}
	return &nomadapi.NodeListStub{ID: "n1", Status: "ready", NodeResources: &nomadapi.NodeResources{Devices: devs}}
}

func alloc(id, ns, job, typ string, devIDs ...string) *nomadapi.AllocationListStub {
	return &nomadapi.AllocationListStub{ID: id, Namespace: ns, JobID: job, TaskGroup: "g", NodeID: "n1",
		DesiredStatus: "run", ClientStatus: "running", CreateTime: int64(100 * time.Second),
		AllocatedResources: &nomadapi.AllocatedResources{Tasks: map[string]*nomadapi.AllocatedTaskResources{
			"t": {Devices: []*nomadapi.AllocatedDeviceResource{{Vendor: "nvidia", Type: typ, DeviceIDs: devIDs}}}}}}
}

func jobStub(ns, id string, queued int, stop bool, meta map[string]string) *nomadapi.JobListStub {
	return &nomadapi.JobListStub{ID: id, Namespace: ns, Priority: 50, Stop: stop, Meta: meta, SubmitTime: int64(50 * time.Second),
		JobSummary: &nomadapi.JobSummary{Summary: map[string]nomadapi.TaskGroupSummary{"g": {Queued: queued}}}}
}

func spec(ns, id, device string, count uint64) *nomadapi.Job {
	task := nomadapi.NewTask("t", "raw_exec")
	task.Resources = &nomadapi.Resources{Devices: []*nomadapi.RequestedDevice{{Name: device, Count: ptr(count)}}}
	j := nomadapi.NewBatchJob(id, id, "global", 50)
	j.Namespace = ptr(ns)
	j.Version = ptr(uint64(3))
	j.AddTaskGroup(nomadapi.NewTaskGroup("g", 2).AddTask(task))
	return j
}

func TestAssemble(t *testing.T) {
	settings := []quota.Settings{
		{Project: "a", Namespace: "a", Guaranteed: 200, OverQuotaWeight: 1},
		{Project: "research", Namespace: "r", Guaranteed: 100, OverQuotaWeight: 1, JobMetaKey: "project"},
	}
	in := Inputs{
		Nodes: []*nomadapi.NodeListStub{node()},
		Allocations: []*nomadapi.AllocationListStub{
			alloc("al1", "a", "train", "gpu", "GPU-a"),
			alloc("al2", "b", "nb", "gpu-share", vocab.Share("GPU-c", 0), vocab.Share("GPU-c", 1), vocab.Share("GPU-c", 7)),
			alloc("al3", "x", "meta", "gpu", "GPU-b"),
			alloc("al4", "a", "unfinished", "gpu-share", vocab.Share("GPU-d", 0), vocab.Share("GPU-d", 1)),
			alloc("al5", "a", "unfinished", "gpu-share", vocab.Share("GPU-d", 2), vocab.Share("GPU-d", 3)),
		},
		Jobs: []*nomadapi.JobListStub{
			jobStub("a", "train", 0, false, nil),
			jobStub("b", "nb", 0, false, nil),
			jobStub("x", "meta", 0, false, map[string]string{"project": "research", MetaPreempt: "false"}),
			jobStub("b", "waiting", 2, false, nil),
			jobStub("a", "parked", 0, true, nil),
			jobStub("a", "unfinished", 0, false, nil),
		},
		Specs: map[string]*nomadapi.Job{
			"b/waiting":    spec("b", "waiting", "nvidia/gpu", 1),
			"a/parked":     stoppedAt(spec("a", "parked", "nvidia/gpu-share", 30), 9),
			"a/unfinished": withIndex(spec("a", "unfinished", "nvidia/gpu-share", 2), 5),
		},
		Settings: settings,
		Suspensions: []state.Suspension{
			{Namespace: "a", Job: "parked", Phase: state.PhaseSuspended, StopJobModifyIndex: 9, Time: time.Unix(70, 0)},
			{Namespace: "a", Job: "unfinished", Phase: state.PhaseStopping, JobModifyIndex: 5},
			{Namespace: "a", Job: "gone", Phase: state.PhaseSuspended, Tagged: true},
		},
		Unlisted: map[string]error{"a/gone": nil},
		Now:      time.Unix(200, 0),
	}
	v := Assemble(in)
	snap := v.Snapshot
	if len(snap.Nodes) != 1 || len(snap.Nodes[0].GPUs) != 4 {
		t.Fatalf("nodes %+v: want one node with 4 GPUs", snap.Nodes)
	}
	if _, err := snap.Index(); err != nil {
		t.Fatalf("snapshot does not index: %v", err)
	}
	wantAllocs := map[string]cluster.Allocation{
		"al4": {ID: "al4", Project: "a", Job: "a/unfinished", Group: "g", Priority: 50, Preemptible: true, Ask: cluster.Ask{Shares: 2}, Node: "n1", GPUs: []int{3}, Start: 100},
		"al5": {ID: "al5", Project: "a", Job: "a/unfinished", Group: "g", Priority: 50, Preemptible: true, Ask: cluster.Ask{Shares: 2}, Node: "n1", GPUs: []int{3}, Start: 100},
		"al1": {ID: "al1", Project: "a", Job: "a/train", Group: "g", Priority: 50, Preemptible: true, Ask: cluster.Ask{WholeGPUs: 1}, Node: "n1", GPUs: []int{0}, Start: 100},
		"al2": {ID: "al2", Project: "b", Job: "b/nb", Group: "g", Priority: 50, Preemptible: true, Ask: cluster.Ask{Shares: 3}, Node: "n1", GPUs: []int{2}, Start: 100},
		"al3": {ID: "al3", Project: "research", Job: "x/meta", Group: "g", Priority: 50, Preemptible: false, Ask: cluster.Ask{WholeGPUs: 1}, Node: "n1", GPUs: []int{1}, Start: 100},
	}
	if len(snap.Allocations) != len(wantAllocs) {
		t.Fatalf("allocations %+v: want %d", snap.Allocations, len(wantAllocs))
	}
	for _, a := range snap.Allocations {
		w := wantAllocs[a.ID]
		if a.Project != w.Project || a.Job != w.Job || a.Ask.WholeGPUs != w.Ask.WholeGPUs || a.Ask.Shares != w.Ask.Shares ||
			a.Preemptible != w.Preemptible || len(a.GPUs) != 1 || a.GPUs[0] != w.GPUs[0] || a.Start != w.Start {
			t.Errorf("allocation %s = %+v, want %+v", a.ID, a, w)
		}
	}
	wantPending := []cluster.Pending{
		{Project: "a", Job: "a/parked", Group: "g", Priority: 50, Preemptible: true, Ask: cluster.Ask{Shares: 30}, Count: 2, Submit: 70, Suspended: true},
		{Project: "b", Job: "b/waiting", Group: "g", Priority: 50, Preemptible: true, Ask: cluster.Ask{WholeGPUs: 1}, Count: 2, Submit: 50},
	}
	if len(snap.Pending) != len(wantPending) {
		t.Fatalf("pending %+v: want %+v", snap.Pending, wantPending)
	}
	for i, p := range snap.Pending {
		w := wantPending[i]
		if p.Project != w.Project || p.Job != w.Job || p.Ask.WholeGPUs != w.Ask.WholeGPUs || p.Ask.Shares != w.Ask.Shares ||
			p.Count != w.Count || p.Submit != w.Submit || p.Suspended != w.Suspended {
			t.Errorf("pending[%d] = %+v, want %+v", i, p, w)
		}
	}
	var names []string
	for _, p := range snap.Projects {
		names = append(names, p.Name)
	}
	if got := len(names); got != 3 || names[0] != "a" || names[1] != "b" || names[2] != "research" {
		t.Errorf("projects %v, want [a b research]", names)
	}
	for key, want := range map[string]Verdict{"a/parked": Suspended, "a/unfinished": Unfinished, "a/gone": Closed} {
		if r := v.Records[key]; r == nil || r.Verdict != want {
			t.Errorf("record %s: %+v, want verdict %d", key, r, want)
		}
	}
}

func withIndex(j *nomadapi.Job, jmi uint64) *nomadapi.Job {
	j.JobModifyIndex, j.ModifyIndex = ptr(jmi), ptr(jmi)
	return j
}

func stoppedAt(j *nomadapi.Job, jmi uint64) *nomadapi.Job {
	j.Stop = ptr(true)
	return withIndex(j, jmi)
}

func TestGroupAsk(t *testing.T) {
	tests := []struct {
		device string
		count  uint64
		want   cluster.Ask
		ok     bool
	}{
		{"nvidia/gpu", 2, cluster.Ask{WholeGPUs: 2}, true},
		{"gpu", 1, cluster.Ask{WholeGPUs: 1}, true},
		{"nvidia/gpu-share", 25, cluster.Ask{Shares: 25}, true},
		{"nvidia/gpu/H100", 1, cluster.Ask{WholeGPUs: 1, Models: []string{"H100"}}, true},
		{"amd/gpu", 1, cluster.Ask{}, false},
		{"nvidia/gpu-share", 150, cluster.Ask{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.device, func(t *testing.T) {
			tg := spec("ns", "j", tt.device, tt.count).TaskGroups[0]
			got, ok, _ := GroupAsk(tg, 1)
			if ok != tt.ok || got.WholeGPUs != tt.want.WholeGPUs || got.Shares != tt.want.Shares || len(got.Models) != len(tt.want.Models) {
				t.Fatalf("GroupAsk(%s count %d) = %+v, %v; want %+v, %v", tt.device, tt.count, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestAssembleCPUAndMemory: a node's CPU and memory are its capacity less
// Nomad's reservation and less what allocations outside the snapshot (CPU
// only) hold; GPU allocations and pending groups carry their asks.
func TestAssembleCPUAndMemory(t *testing.T) {
	n := node()
	n.NodeResources.Cpu.CpuShares, n.NodeResources.Memory.MemoryMB = 10000, 8192
	n.ReservedResources = &nomadapi.NodeReservedResources{Cpu: nomadapi.NodeReservedCpuResources{CpuShares: 1000},
		Memory: nomadapi.NodeReservedMemoryResources{MemoryMB: 1024}}
	gpu := alloc("a1", "a", "train", "gpu", "GPU-a")
	gpu.AllocatedResources.Tasks["t"].Cpu.CpuShares, gpu.AllocatedResources.Tasks["t"].Memory.MemoryMB = 2000, 1000
	cpuOnly := alloc("a2", "a", "web", "gpu")
	cpuOnly.AllocatedResources.Tasks["t"].Devices = nil
	cpuOnly.AllocatedResources.Tasks["t"].Cpu.CpuShares, cpuOnly.AllocatedResources.Tasks["t"].Memory.MemoryMB = 3000, 2000
	sp := spec("a", "queued", "nvidia/gpu", 1)
	sp.TaskGroups[0].Tasks[0].Resources.CPU, sp.TaskGroups[0].Tasks[0].Resources.MemoryMB = ptr(500), ptr(256)
	v := Assemble(Inputs{Nodes: []*nomadapi.NodeListStub{n}, Allocations: []*nomadapi.AllocationListStub{gpu, cpuOnly},
		Jobs:  []*nomadapi.JobListStub{jobStub("a", "train", 0, false, nil), jobStub("a", "web", 0, false, nil), jobStub("a", "queued", 1, false, nil)},
		Specs: map[string]*nomadapi.Job{"a/queued": sp}, Now: time.Unix(1000, 0)})
	if len(v.Snapshot.Nodes) != 1 {
		t.Fatalf("nodes %+v", v.Snapshot.Nodes)
	}
	// 10000-1000-3000 MHz, 8192-1024-2000 MiB.
	if got := v.Snapshot.Nodes[0]; got.CPUMilli != 6000 || got.MemoryMiB != 5168 {
		t.Fatalf("node CPU %d, memory %d; want 6000, 5168", got.CPUMilli, got.MemoryMiB)
	}
	if len(v.Snapshot.Allocations) != 1 || v.Snapshot.Allocations[0].Ask.CPUMilli != 2000 || v.Snapshot.Allocations[0].Ask.MemoryMiB != 1000 {
		t.Fatalf("allocations %+v: want the GPU one with 2000 MHz, 1000 MiB", v.Snapshot.Allocations)
	}
	if len(v.Snapshot.Pending) != 1 || v.Snapshot.Pending[0].Ask.CPUMilli != 500 || v.Snapshot.Pending[0].Ask.MemoryMiB != 256 {
		t.Fatalf("pending %+v: want 500 MHz, 256 MiB", v.Snapshot.Pending)
	}
	if _, err := v.Snapshot.Index(); err != nil {
		t.Fatalf("snapshot does not index: %v", err)
	}
}

// TestAssembleCoarseShares: on nodes whose plugin publishes 4 share
// instances per GPU (shares_per_gpu = 4), a pending request for 2
// instances asks for half a GPU and an allocation holding one instance
// holds a quarter.
func TestAssembleCoarseShares(t *testing.T) {
	n := node()
	for _, g := range n.NodeResources.Devices {
		if g.Type != vocab.TypeShare {
			continue
		}
		u := strings.TrimPrefix(g.Name, "A100-")
		g.Attributes = map[string]*nomadapi.Attribute{vocab.SharesAttr: {IntVal: ptr(int64(4))}}
		g.Instances = nil
		for k := range 4 {
			g.Instances = append(g.Instances, &nomadapi.NodeDevice{ID: vocab.ShareOf(u, k, 4), Healthy: true})
		}
	}
	v := Assemble(Inputs{
		Nodes:       []*nomadapi.NodeListStub{n},
		Allocations: []*nomadapi.AllocationListStub{alloc("al1", "a", "small", "gpu-share", vocab.ShareOf("GPU-c", 0, 4))},
		Jobs:        []*nomadapi.JobListStub{jobStub("a", "small", 0, false, nil), jobStub("a", "waiting", 2, false, nil)},
		Specs: map[string]*nomadapi.Job{
			"a/small":   spec("a", "small", "nvidia/gpu-share", 1),
			"a/waiting": spec("a", "waiting", "nvidia/gpu-share", 2),
		},
		Now: time.Unix(1000, 0),
	})
	var pending cluster.Shares
	for _, p := range v.Snapshot.Pending {
		if p.Job == "a/waiting" {
			pending = p.Ask.Shares
		}
	}
	if pending != 50 {
		t.Errorf("pending ask = %d shares, want 50 (2 instances of 25)", pending)
	}
	if len(v.Snapshot.Allocations) != 1 || v.Snapshot.Allocations[0].Ask.Shares != 25 {
		t.Errorf("allocations = %+v, want one of 25 shares", v.Snapshot.Allocations)
	}
	if len(v.Warnings) != 0 {
		t.Errorf("warnings: %v", v.Warnings)
	}
}

// TestAssembleDepartments: the snapshot carries the departments in force
// and each project's department, so the plan reports what a department's
// projects hold together; a project with work but no quota is on its own.
func TestAssembleDepartments(t *testing.T) {
	in := Inputs{
		Nodes:       []*nomadapi.NodeListStub{node()},
		Allocations: []*nomadapi.AllocationListStub{alloc("al1", "a", "train", "gpu", "GPU-a"), alloc("al2", "b", "nb", "gpu", "GPU-b")},
		Jobs:        []*nomadapi.JobListStub{jobStub("a", "train", 0, false, nil), jobStub("b", "nb", 0, false, nil)},
		Settings:    []quota.Settings{{Project: "a", Namespace: "a", Guaranteed: 200, OverQuotaWeight: 1, Department: "eng"}},
		Departments: []quota.Department{{Name: "eng", Guaranteed: 300, Priority: 2, OverQuotaWeight: 1}},
		Now:         time.Unix(200, 0),
	}
	snap := Assemble(in).Snapshot
	if len(snap.Departments) != 1 || snap.Departments[0].Name != "eng" || snap.Departments[0].Guaranteed != 300 || snap.Departments[0].Priority != 2 {
		t.Fatalf("departments %+v, want eng (3 GPUs, priority 2)", snap.Departments)
	}
	depOf := map[string]string{}
	for _, p := range snap.Projects {
		depOf[p.Name] = p.Department
	}
	if depOf["a"] != "eng" || depOf["b"] != "" {
		t.Fatalf("project departments %v, want a in eng and b on its own", depOf)
	}
	res, err := plan.Plan(snap, plan.Options{})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if len(res.Departments) != 1 || res.Departments[0].Name != "eng" || res.Departments[0].Usage != 100 || res.Departments[0].Guaranteed != 300 {
		t.Fatalf("plan's departments %+v, want eng holding 1 GPU of its 3", res.Departments)
	}
}
