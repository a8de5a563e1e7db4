package service

import (
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
)

// TestGPUMap: each GPU shows its family and what its tenants hold: a
// whole-GPU job all of each GPU it binds, a share job its shares.
func TestGPUMap(t *testing.T) {
	snap := &model.Snapshot{
		Nodes: []model.Node{
			{Name: "n2", GPUs: []model.GPU{{Model: "H100", Mode: model.ModeAny}, {Model: "H100", Mode: model.ModeShared}}},
			{Name: "cpu-only"},
			{Name: "n1", GPUs: []model.GPU{{Model: "A100", Mode: model.ModeAny, Unavailable: "Xid 79"}}},
		},
		Allocations: []model.Allocation{
			{Job: "team-a/train", Project: "team-a", Node: "n2", GPUs: []int{0}, Ask: model.Ask{WholeGPUs: 1}},
			{Job: "team-b/infer", Project: "team-b", Node: "n2", GPUs: []int{1}, Ask: model.Ask{Shares: 25}},
			{Job: "team-b/nb", Project: "team-b", Node: "n2", GPUs: []int{1}, Ask: model.Ask{Shares: 50}},
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
