package service

import (
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
)

// TestGPUMap: each GPU shows its family and what its tenants hold: a
// whole-GPU job all of each GPU it binds, a share job its shares.
func TestGPUMap(t *testing.T) {
	snap := &cluster.Snapshot{
		Nodes: []cluster.Node{
			{Name: "n2", GPUs: []cluster.GPU{{Model: "H100", Mode: cluster.ModeAny}, {Model: "H100", Mode: cluster.ModeShared}}},
			{Name: "cpu-only"},
			{Name: "n1", GPUs: []cluster.GPU{{Model: "A100", Mode: cluster.ModeAny, Unavailable: "Xid 79"}}},
		},
		Allocations: []cluster.Allocation{
			{Job: "team-a/train", Project: "team-a", Node: "n2", GPUs: []int{0}, Ask: cluster.Ask{WholeGPUs: 1}},
			{Job: "team-b/infer", Project: "team-b", Node: "n2", GPUs: []int{1}, Ask: cluster.Ask{Shares: 25}},
			{Job: "team-b/nb", Project: "team-b", Node: "n2", GPUs: []int{1}, Ask: cluster.Ask{Shares: 50}},
			{Job: "team-c/cpu", Project: "team-c", Node: "cpu-only"},
		},
	}
	nodes := gpuMap(snap)
	if len(nodes) != 2 || nodes[0].Node != "n1" || nodes[1].Node != "n2" {
		t.Fatalf("nodes %+v, want n1 and n2 (GPU nodes, by name)", nodes)
	}
	if g := nodes[0].GPUs[0]; g.Unavailable != "Xid 79" || g.Family != "idle" || g.Held != 0 {
		t.Errorf("n1's GPU: %+v", g)
	}
	whole, shared := nodes[1].GPUs[0], nodes[1].GPUs[1]
	if whole.Family != "whole" || whole.Held != 100 || len(whole.Tenants) != 1 || whole.Tenants[0].Job != "train" {
		t.Errorf("whole GPU: %+v", whole)
	}
	if shared.Family != "shared" || shared.Held != 75 || len(shared.Tenants) != 2 || shared.Tenants[0].Job != "infer" || shared.Tenants[1].Shares != 50 {
		t.Errorf("shared GPU: %+v", shared)
	}
}

// TestGPUMapMemory: the plugins' reports add each GPU's memory, each share
// tenant's use against its request and limit with what it borrows, and a
// guest under the GPU it runs on; a node that did not answer shows none.
func TestGPUMapMemory(t *testing.T) {
	snap := &cluster.Snapshot{
		Nodes: []cluster.Node{
			{Name: "n1", GPUs: []cluster.GPU{{ID: "GPU-a", Model: "H100", Mode: cluster.ModeShared}, {ID: "GPU-b", Model: "H100", Mode: cluster.ModeAny}}},
			{Name: "n2", GPUs: []cluster.GPU{{ID: "GPU-c", Model: "H100", Mode: cluster.ModeShared}}},
		},
		Allocations: []cluster.Allocation{
			{ID: "a1", Job: "default/nb-a", Project: "default", Node: "n1", GPUs: []int{0}, Ask: cluster.Ask{Shares: 50}},
			{ID: "a2", Job: "default/nb-b", Project: "default", Node: "n1", GPUs: []int{0}, Ask: cluster.Ask{Shares: 50}},
			{ID: "a3", Job: "team-b/infer", Project: "team-b", Node: "n2", GPUs: []int{0}, Ask: cluster.Ask{Shares: 25}},
		},
	}
	reports := []nodeusage.Report{{
		GPUs: []nodeusage.GPU{{UUID: "GPU-a", TotalMiB: 81920, UsedMiB: 30000}, {UUID: "GPU-b", TotalMiB: 81920, UsedMiB: 70000}},
		Tenants: []nodeusage.Tenant{
			{AllocID: "a1", Home: "GPU-a", GPU: "GPU-a", RequestMiB: 40960, LimitMiB: 81920, UsedMiB: 30000},
			{AllocID: "a2", Home: "GPU-a", GPU: "GPU-b", Guest: true, RequestMiB: 40960, LimitMiB: 81920, UsedMiB: 70000},
		},
	}}
	nodes := gpuMap(snap)
	addMemory(nodes, reports)
	home, host := nodes[0].GPUs[0], nodes[0].GPUs[1]
	if home.Memory == nil || home.Memory.UsedMiB != 30000 || host.Memory == nil || host.Memory.UsedMiB != 70000 {
		t.Fatalf("GPU memory: home %+v, host %+v", home.Memory, host.Memory)
	}
	a, b := home.Tenants[0].Memory, home.Tenants[1].Memory
	if a == nil || a.UsedMiB != 30000 || a.BorrowedMiB != 0 || a.GuestOn != nil {
		t.Errorf("nb-a: %+v, want 30000 MiB used, nothing borrowed, at home", a)
	}
	if b == nil || b.BorrowedMiB != 70000-40960 || b.GuestOn == nil || *b.GuestOn != 1 {
		t.Errorf("nb-b: %+v, want %d MiB borrowed, a guest on GPU 1", b, 70000-40960)
	}
	if len(host.Guests) != 1 || host.Guests[0].Job != "nb-b" || host.Guests[0].Memory.Home == nil || *host.Guests[0].Memory.Home != 0 {
		t.Errorf("GPU 1's guests: %+v, want nb-b from GPU 0", host.Guests)
	}
	if g := nodes[1].GPUs[0]; g.Memory != nil || g.Tenants[0].Memory != nil {
		t.Errorf("n2 sent no report, yet its GPU shows %+v", g)
	}
}
