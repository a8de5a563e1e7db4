package nomadwatch

import (
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/device/ids"
	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
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
func TestAssembleGPUHealth(t *testing.T) {
	tests := []struct {
		desc string
		want string
	}{
		{"gpushare: switching to share mode (withdrawn)", ""},
		{"gpushare: settling before first publication in whole mode", ""},
		{"gpushare: waiting to read GPU usage from the Nomad API", ""},
		{"gpushare: nvml: GPU is lost", "unhealthy: gpushare: nvml: GPU is lost"},
		{"", "unhealthy"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			n := node()
			for _, g := range n.NodeResources.Devices {
				for _, inst := range g.Instances {
					if id, _ := ids.Parse(inst.ID); id.UUID == "GPU-c" {
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
	twoTasks := alloc("two", "a", "train", "gpu-share", ids.Share("GPU-c", 0), ids.Share("GPU-c", 1))
	twoTasks.AllocatedResources.Tasks["u"] = &nomadapi.AllocatedTaskResources{Devices: []*nomadapi.AllocatedDeviceResource{
		{Vendor: "nvidia", Type: "gpu-share", DeviceIDs: []string{ids.Share("GPU-d", 5), ids.Share("GPU-d", 6), ids.Share("GPU-d", 7)}}}}
	var all []string
	for k := range ids.SharesPerGPU {
		all = append(all, ids.Share("GPU-d", k))
	}
	full := alloc("full", "a", "train", "gpu-share", all...)
	mixed := alloc("mixed", "a", "train", "gpu", "GPU-a")
	mixed.AllocatedResources.Tasks["u"] = &nomadapi.AllocatedTaskResources{Devices: []*nomadapi.AllocatedDeviceResource{
		{Vendor: "nvidia", Type: "gpu-share", DeviceIDs: []string{ids.Share("GPU-c", 9)}}}}
	tests := []struct {
		name  string
		alloc *nomadapi.AllocationListStub
		want  model.Shares
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
			if x.Usage[0] != tt.want {
				t.Errorf("usage %s, want %s", x.Usage[0], tt.want)
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
