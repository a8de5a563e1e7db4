package alloctrack

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/feasible"
	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/hashicorp/nomad/api"
)

func TestRequestFamily(t *testing.T) {
	groups := map[string]map[string]bool{vocab.TypeWhole: {"NVIDIA H100": true}, vocab.TypeShare: {"NVIDIA H100-abcd": true}}
	tests := []struct {
		name, typ string
		ok        bool
	}{
		{"gpu", vocab.TypeWhole, true},
		{"nvidia/gpu", vocab.TypeWhole, true},
		{"nvidia/gpu/NVIDIA H100", vocab.TypeWhole, true},
		{"nvidia/gpu/NVIDIA A100", "", false},
		{"gpu-share", vocab.TypeShare, true},
		{"nvidia/gpu-share/NVIDIA H100-abcd", vocab.TypeShare, true},
		{"nvidia/gpu-share/NVIDIA H100-ffff", "", false},
		{"amd/gpu", "", false},
		{"nvidia/fpga", "", false},
	}
	for _, tt := range tests {
		typ, ok := requestFamily(vocab.ParseRequestName(tt.name), groups)
		if typ != tt.typ || ok != tt.ok {
			t.Errorf("%q: (%q, %v), want (%q, %v)", tt.name, typ, ok, tt.typ, tt.ok)
		}
	}
}

// TestMIGGroupsAreNoDemand: a request naming a MIG device group waits for
// a MIG device; no switch of a whole GPU serves it.
func TestMIGGroupsAreNoDemand(t *testing.T) {
	mig := "mig"
	node := &api.Node{NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{
		{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA A100"},
		{Vendor: "nvidia", Type: "gpu", Name: "NVIDIA A100 MIG 1g.5gb", Attributes: map[string]*api.Attribute{"sharing": {StringVal: &mig}}},
	}}}
	groups := deviceGroupNames(node)
	if _, ok := requestFamily(vocab.ParseRequestName("nvidia/gpu/NVIDIA A100 MIG 1g.5gb"), groups); ok {
		t.Error("a request for a MIG device counts as whole-GPU demand")
	}
	if _, ok := requestFamily(vocab.ParseRequestName("nvidia/gpu/NVIDIA A100"), groups); !ok {
		t.Error("a request for a whole GPU model is no demand")
	}
}

func TestJobDemand(t *testing.T) {
	groups := map[string]map[string]bool{vocab.TypeWhole: {}, vocab.TypeShare: {}}
	sub := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(reqs ...string) *api.Job {
		j := &api.Job{SubmitTime: new(sub.UnixNano())}
		task := &api.Task{Name: "t", Resources: &api.Resources{}}
		for _, r := range reqs {
			var name string
			var n uint64
			fmt.Sscanf(r, "%s %d", &name, &n)
			task.Resources.Devices = append(task.Resources.Devices, &api.RequestedDevice{Name: name, Count: &n})
		}
		j.TaskGroups = []*api.TaskGroup{{Name: new("g"), Tasks: []*api.Task{task}}}
		return j
	}
	devFail := func(coalesced int) map[string]*api.AllocationMetric {
		return map[string]*api.AllocationMetric{"g": {DimensionExhausted: map[string]int{"devices: no devices match request": 1}, CoalescedFailures: coalesced}}
	}
	tests := []struct {
		name   string
		job    *api.Job
		failed map[string]*api.AllocationMetric
		want   string
	}{
		{"whole request", mk("nvidia/gpu 2"), devFail(0), "[ns/j/g/t/0#0(2 whole)]"},
		{"share request, three allocations waiting", mk("nvidia/gpu-share 60"), devFail(2),
			"[ns/j/g/t/0#0(60 shares) ns/j/g/t/0#1(60 shares) ns/j/g/t/0#2(60 shares)]"},
		{"two requests", mk("gpu 1", "gpu-share 10"), devFail(0), "[ns/j/g/t/0#0(1 whole) ns/j/g/t/1#0(10 shares)]"},
		{"failed on memory only: no demand", mk("gpu 1"),
			map[string]*api.AllocationMetric{"g": {DimensionExhausted: map[string]int{"memory": 1}}}, "[]"},
		{"missing devices counts", mk("gpu 1"),
			map[string]*api.AllocationMetric{"g": {ConstraintFiltered: map[string]int{"missing devices": 1}}}, "[ns/j/g/t/0#0(1 whole)]"},
		{"other vendor: no demand", mk("amd/gpu 1"), devFail(0), "[]"},
		{"group not failed: no demand", mk("gpu 1"), map[string]*api.AllocationMetric{"other": devFail(0)["g"]}, "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := jobDemand("ns/j", tt.job, tt.failed, nil, groups, 1)
			if s := fmt.Sprint(got); s != tt.want {
				t.Errorf("demand %s, want %s", s, tt.want)
			}
			for _, d := range got {
				if !d.Since.Equal(sub) {
					t.Errorf("%s: since %v, want the submission time", d.Key, d.Since)
				}
			}
		})
	}
}

// TestDemandNetsPlacementsOfTheEvaluation: a blocked evaluation still
// listed after it placed allocations on this node (Nomad marks it complete,
// or re-blocks it with the failures it was created with, in a write after
// the plan's) waits only for what it has not placed here; allocations of
// other evaluations, or of other groups, do not count against it.
func TestDemandNetsPlacementsOfTheEvaluation(t *testing.T) {
	groups := map[string]map[string]bool{vocab.TypeWhole: {}, vocab.TypeShare: {}}
	n := uint64(50)
	task := &api.Task{Name: "t", Resources: &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/gpu-share", Count: &n}}}}
	job := &api.Job{SubmitTime: new(int64(1)), TaskGroups: []*api.TaskGroup{{Name: new("g"), Tasks: []*api.Task{task}}, {Name: new("h"), Tasks: []*api.Task{task}}}}
	failed := func(g string, coalesced int) map[string]*api.AllocationMetric {
		return map[string]*api.AllocationMetric{g: {ConstraintFiltered: map[string]int{"missing devices": 1}, CoalescedFailures: coalesced}}
	}
	placed := func(eval, group, status string) *api.Allocation {
		return &api.Allocation{ID: eval + "-" + group + "-" + status, EvalID: eval, TaskGroup: group, ClientStatus: status}
	}
	tests := []struct {
		name   string
		failed map[string]*api.AllocationMetric
		allocs []*api.Allocation
		want   string
	}{
		{"nothing placed: all wait", failed("g", 1), nil, "[ns/j/g/t/0#0(50 shares) ns/j/g/t/0#1(50 shares)]"},
		{"placed here by the evaluation: served", failed("g", 0), []*api.Allocation{placed("blocked", "g", "running")}, "[]"},
		{"one of two placed: one waits", failed("g", 1), []*api.Allocation{placed("blocked", "g", "pending")}, "[ns/j/g/t/0#0(50 shares)]"},
		{"placed and ended: still served", failed("g", 0), []*api.Allocation{placed("blocked", "g", "complete")}, "[]"},
		{"placed by the evaluation before (the run that blocked it): waits", failed("g", 0),
			[]*api.Allocation{placed("register", "g", "running")}, "[ns/j/g/t/0#0(50 shares)]"},
		{"placed for another group: waits", failed("g", 0), []*api.Allocation{placed("blocked", "h", "running")}, "[ns/j/g/t/0#0(50 shares)]"},
		{"more placed than failed: nothing, never negative", failed("g", 0),
			[]*api.Allocation{placed("blocked", "g", "running"), placed("blocked", "g", "failed")}, "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := jobDemand("ns/j", job, tt.failed, placedByEval(tt.allocs)["blocked"], groups, 1)
			if s := fmt.Sprint(got); s != tt.want {
				t.Errorf("demand %s, want %s", s, tt.want)
			}
		})
	}
}

// TestAdmittedGroups: only the failed groups this node admits count as its
// demand: the job's datacenters and pool, and constraints on the node at
// job, group or task level.
func TestAdmittedGroups(t *testing.T) {
	node := feasible.NodeOf(&api.Node{ID: "n1", Datacenter: "dc1", NodePool: "gpu",
		Attributes: map[string]string{"kernel.name": "linux"}, Meta: map[string]string{"rack": "r1"}})
	failed := map[string]*api.AllocationMetric{"g": {ConstraintFiltered: map[string]int{"missing devices": 1}}}
	constraint := func(target, value string) []*api.Constraint {
		return []*api.Constraint{{LTarget: target, RTarget: value, Operand: "="}}
	}
	tests := []struct {
		name  string
		job   *api.Job
		group *api.TaskGroup
		want  bool
	}{
		{"admitted", &api.Job{Datacenters: []string{"dc*"}, NodePool: new("gpu")}, &api.TaskGroup{}, true},
		{"other datacenter", &api.Job{Datacenters: []string{"dc2"}, NodePool: new("gpu")}, &api.TaskGroup{}, false},
		{"other pool", &api.Job{Datacenters: []string{"dc1"}, NodePool: new("cpu")}, &api.TaskGroup{}, false},
		{"job constraint not met", &api.Job{Datacenters: []string{"dc1"}, NodePool: new("gpu"), Constraints: constraint("${attr.kernel.name}", "windows")}, &api.TaskGroup{}, false},
		{"group constraint met", &api.Job{Datacenters: []string{"dc1"}, NodePool: new("gpu")}, &api.TaskGroup{Constraints: constraint("${meta.rack}", "r1")}, true},
		{"task constraint not met", &api.Job{Datacenters: []string{"dc1"}, NodePool: new("gpu")},
			&api.TaskGroup{Tasks: []*api.Task{{Name: "t", Constraints: constraint("${meta.rack}", "r2")}}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.group.Name = new("g")
			tt.job.TaskGroups = []*api.TaskGroup{tt.group}
			got := admitted(node, tt.job, failed)
			if (got["g"] != nil) != tt.want {
				t.Errorf("group admitted: %v, want %v", got["g"] != nil, tt.want)
			}
		})
	}
}
