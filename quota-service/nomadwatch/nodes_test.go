package nomadwatch

import (
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	"github.com/gpushare/nomad-gpushare/vocab"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestAssembleNodesOutOfPlanning checks that a node Nomad places nothing
// on, or one holding work the snapshot cannot account for, is out of
// planning with the reason while its work still counts, and that the
// snapshot plans on (no error, no halt).
func TestAssembleNodesOutOfPlanning(t *testing.T) {
	jobs := []*nomadapi.JobListStub{jobStub("a", "train", 0, false, nil)}
	tests := []struct {
		name   string
		node   func() *nomadapi.NodeListStub
		device string
		want   string // in the node's reason; "" for a node in planning
	}{
		{"node ready, GPU published", node, "GPU-a", ""},
		{"node initializing", func() *nomadapi.NodeListStub { n := node(); n.Status = "initializing"; return n }, "GPU-a", "node is initializing"},
		{"node down", func() *nomadapi.NodeListStub { n := node(); n.Status = "down"; return n }, "GPU-a", "node is down"},
		{"node draining", func() *nomadapi.NodeListStub { n := node(); n.Drain = true; return n }, "GPU-a", "draining"},
		{"node ineligible", func() *nomadapi.NodeListStub { n := node(); n.SchedulingEligibility = "ineligible"; return n }, "GPU-a", "ineligible"},
		{"GPU not published", node, "GPU-unknown", "does not publish"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Assemble(Inputs{Nodes: []*nomadapi.NodeListStub{tt.node()},
				Allocations: []*nomadapi.AllocationListStub{alloc("al1", "a", "train", "gpu", tt.device)},
				Jobs:        jobs, Now: time.Unix(100, 0)})
			snap := v.Snapshot
			if len(snap.Nodes) != 1 {
				t.Fatalf("nodes %+v, want n1", snap.Nodes)
			}
			if got := snap.Nodes[0].Unavailable; (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Fatalf("node unavailable %q, want %q", got, tt.want)
			}
			res, err := plan.Plan(snap, plan.Options{})
			if err != nil {
				t.Fatalf("plan: %v", err)
			}
			if res.Shares[0].Usage != 100 {
				t.Errorf("project a holds %s, want its allocation's 1.00 counted", res.Shares[0].Usage)
			}
		})
	}
}

// TestAssembleGPUHealth: a GPU the plugin withdraws for a switch between
// device families is capacity; one unhealthy for another reason is not.
// The withdrawals are the vocabulary's (package vocab), which the plugin
// publishes (device/partition's TestWithdrawalsSpeakTheContract), so that
// the two sides cannot drift apart.
func TestAssembleGPUHealth(t *testing.T) {
	blind := "gpushare: not offered while the plugin cannot see every allocation on this node: token cannot read namespace secret"
	tests := []struct {
		desc string
		want string
	}{
		{vocab.WithdrawnSwitching(vocab.SharingShare, "withdrawing"), ""},
		{vocab.WithdrawnSwitching(vocab.SharingWhole, "settling"), ""},
		{vocab.WithdrawnSettling(vocab.SharingWhole), ""},
		{vocab.WithdrawnWaiting(), ""},
		{vocab.WithdrawnConflict(), ""},
		{"gpushare: nvml: GPU is lost", "unhealthy: gpushare: nvml: GPU is lost"},
		{blind, "unhealthy: " + blind},
		{"", "unhealthy"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			n := node()
			for _, g := range n.NodeResources.Devices {
				for _, inst := range g.Instances {
					if id, _ := vocab.Parse(inst.ID); id.UUID == "GPU-c" {
						inst.Healthy, inst.HealthDescription = false, tt.desc
					}
				}
			}
			v := Assemble(Inputs{Nodes: []*nomadapi.NodeListStub{n}, Now: time.Unix(100, 0)})
			gpus := v.Snapshot.Nodes[0].GPUs
			if got := gpus[2].Unavailable; got != tt.want {
				t.Errorf("GPU-c unavailable %q, want %q", got, tt.want)
			}
			if gpus[0].Unavailable != "" || gpus[3].Unavailable != "" {
				t.Errorf("healthy GPUs marked unavailable: %+v", gpus)
			}
		})
	}
}

// TestAssembleHoldsWhereverTheyLand: an allocation's usage is counted
// from its device IDs: shares of two GPUs (two tasks) on both GPUs, 100
// shares of one GPU as a whole GPU, whole GPUs and shares together.
func TestAssembleHoldsWhereverTheyLand(t *testing.T) {
	twoTasks := alloc("two", "a", "train", "gpu-share", vocab.Share("GPU-c", 0), vocab.Share("GPU-c", 1))
	twoTasks.AllocatedResources.Tasks["u"] = &nomadapi.AllocatedTaskResources{Devices: []*nomadapi.AllocatedDeviceResource{
		{Vendor: "nvidia", Type: "gpu-share", DeviceIDs: []string{vocab.Share("GPU-d", 5), vocab.Share("GPU-d", 6), vocab.Share("GPU-d", 7)}}}}
	var all []string
	for k := range vocab.DefaultSharesPerGPU {
		all = append(all, vocab.Share("GPU-d", k))
	}
	full := alloc("full", "a", "train", "gpu-share", all...)
	mixed := alloc("mixed", "a", "train", "gpu", "GPU-a")
	mixed.AllocatedResources.Tasks["u"] = &nomadapi.AllocatedTaskResources{Devices: []*nomadapi.AllocatedDeviceResource{
		{Vendor: "nvidia", Type: "gpu-share", DeviceIDs: []string{vocab.Share("GPU-c", 9)}}}}
	tests := []struct {
		name  string
		alloc *nomadapi.AllocationListStub
		want  cluster.Shares
	}{
		{"shares of two GPUs through two tasks", twoTasks, 5},
		{"100 shares of one GPU", full, 100},
		{"a whole GPU and a share", mixed, 101},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Assemble(Inputs{Nodes: []*nomadapi.NodeListStub{node()}, Allocations: []*nomadapi.AllocationListStub{tt.alloc},
				Jobs: []*nomadapi.JobListStub{jobStub("a", "train", 0, false, nil)}, Now: time.Unix(100, 0)})
			if u := v.Snapshot.Nodes[0].Unavailable; u != "" {
				t.Fatalf("node out of planning: %s", u)
			}
			x, err := v.Snapshot.Index()
			if err != nil {
				t.Fatalf("snapshot does not index: %v", err)
			}
			if x.Held[0] != tt.want {
				t.Errorf("usage %s, want %s", x.Held[0], tt.want)
			}
			for _, al := range v.Snapshot.Allocations {
				if al.ID != tt.alloc.ID {
					t.Errorf("allocation part %+v, want ID %s", al, tt.alloc.ID)
				}
			}
		})
	}
}

// TestAssembleSystemJobs: system and sysbatch allocations are marked so
// that the planner never suspends them.
func TestAssembleSystemJobs(t *testing.T) {
	for _, typ := range []string{"system", "sysbatch", "batch"} {
		stub := jobStub("a", "train", 0, false, nil)
		stub.Type = typ
		v := Assemble(Inputs{Nodes: []*nomadapi.NodeListStub{node()}, Allocations: []*nomadapi.AllocationListStub{alloc("al1", "a", "train", "gpu", "GPU-a")},
			Jobs: []*nomadapi.JobListStub{stub}, Now: time.Unix(100, 0)})
		if got, want := v.Snapshot.Allocations[0].System, typ != "batch"; got != want {
			t.Errorf("%s job: System %v, want %v", typ, got, want)
		}
	}
}

// TestAssembleMIGDevices: a MIG device counts as the part of its GPU it is
// (docs/design.md, Units and device families), in capacity and in the
// usage of the work that holds it: the gpushare plugin's gpu_shares
// attribute, else the slices of its profile over seven, else (with a
// warning) one GPU. The planner never places work on it.
func TestAssembleMIGDevices(t *testing.T) {
	str := func(s string) *nomadapi.Attribute { return &nomadapi.Attribute{StringVal: &s} }
	num := func(n int64) *nomadapi.Attribute { return &nomadapi.Attribute{IntVal: &n} }
	tests := []struct {
		name    string
		group   string
		attrs   map[string]*nomadapi.Attribute
		want    cluster.Shares
		warning string
	}{
		{"gpushare plugin, 1g of 7 slices", "NVIDIA A100-SXM4-80GB MIG 1g.10gb",
			map[string]*nomadapi.Attribute{vocab.SharingAttr: str(vocab.SharingMIG), "mig_profile": str("1g.10gb"), vocab.MIGSharesAttr: num(14)}, 14, ""},
		{"gpushare plugin, A30 2g of 4 slices", "NVIDIA A30 MIG 2g.12gb",
			map[string]*nomadapi.Attribute{vocab.SharingAttr: str(vocab.SharingMIG), "mig_profile": str("2g.12gb"), vocab.MIGSharesAttr: num(50)}, 50, ""},
		{"gpushare plugin, the whole GPU as one MIG device", "NVIDIA H100 80GB HBM3 MIG 7g.80gb",
			map[string]*nomadapi.Attribute{vocab.SharingAttr: str(vocab.SharingMIG), vocab.MIGSharesAttr: num(100)}, 100, ""},
		{"profile attribute only", "NVIDIA A100-SXM4-40GB MIG 2g.10gb",
			map[string]*nomadapi.Attribute{"mig_profile": str("2g.10gb")}, 28, ""},
		{"profile in the group name only (another plugin)", "NVIDIA A100-SXM4-40GB MIG 3g.20gb", nil, 42, ""},
		{"neither", "mystery", map[string]*nomadapi.Attribute{vocab.SharingAttr: str(vocab.SharingMIG)}, 100, "counts as one GPU"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := node()
			n.NodeResources.Devices = append(n.NodeResources.Devices, &nomadapi.NodeDeviceResource{Vendor: "nvidia", Type: "gpu", Name: tt.group,
				Attributes: tt.attrs, Instances: []*nomadapi.NodeDevice{{ID: "MIG-1", Healthy: true}, {ID: "MIG-2", Healthy: true}}})
			v := Assemble(Inputs{Nodes: []*nomadapi.NodeListStub{n},
				Allocations: []*nomadapi.AllocationListStub{alloc("al1", "a", "train", "gpu", "MIG-1")},
				Jobs:        []*nomadapi.JobListStub{jobStub("a", "train", 0, false, nil), jobStub("a", "wait", 1, false, nil)},
				Specs:       map[string]*nomadapi.Job{"a/wait": spec("a", "wait", "nvidia/gpu-share", 5)},
				Now:         time.Unix(100, 0)})
			var warned bool
			for _, w := range v.Warnings {
				warned = warned || tt.warning != "" && strings.Contains(w, tt.warning)
			}
			if warned != (tt.warning != "") {
				t.Errorf("warnings %q, want one saying %q", v.Warnings, tt.warning)
			}
			snap := v.Snapshot
			if u := snap.Nodes[0].Unavailable; u != "" {
				t.Fatalf("node out of planning: %s", u)
			}
			var mig []cluster.GPU
			for _, g := range snap.Nodes[0].GPUs {
				if g.Mode == cluster.ModeMIG {
					mig = append(mig, g)
				}
			}
			if len(mig) != 2 || mig[0].Capacity() != tt.want || mig[1].Capacity() != tt.want {
				t.Fatalf("MIG devices %+v, want two of %s", mig, tt.want)
			}
			x, err := snap.Index()
			if err != nil {
				t.Fatalf("snapshot does not index: %v", err)
			}
			if want := 4*cluster.SharesPerGPU + 2*tt.want; x.Capacity != want {
				t.Errorf("capacity %s, want %s (four GPUs and two MIG devices)", x.Capacity, want)
			}
			if x.Held[0] != tt.want {
				t.Errorf("usage %s, want the MIG device's %s", x.Held[0], tt.want)
			}
			// Fill the four GPUs: the pending shares may go anywhere but
			// on the free MIG device.
			for i, g := range snap.Nodes[0].GPUs {
				if g.Mode != cluster.ModeMIG {
					snap.Allocations = append(snap.Allocations, cluster.Allocation{ID: "fill" + string(rune('a'+i)), Project: "a", Job: "a/fill",
						Group: "g", Ask: cluster.Ask{WholeGPUs: 1}, Node: "n1", GPUs: []int{i}})
				}
			}
			res, err := plan.Plan(snap, plan.Options{})
			if err != nil {
				t.Fatalf("plan: %v", err)
			}
			for _, a := range res.Actions {
				for _, g := range a.GPUs {
					if a.Kind == plan.Place && snap.Nodes[0].GPUs[g].Mode == cluster.ModeMIG {
						t.Errorf("placed on a MIG device: %v", a)
					}
				}
			}
		})
	}
}
