package model

import (
	"errors"
	"strings"
	"testing"
)

func TestIndexFreeAndUsage(t *testing.T) {
	snap := &Snapshot{
		Nodes:    []Node{{Name: "n1", CPUMilli: 8000, MemoryMiB: 1000, GPUs: []GPU{{Model: "A100"}, {Model: "A100"}}}},
		Projects: []Project{{Name: "a", Guaranteed: 100}},
		Allocations: []Allocation{
			{ID: "x", Project: "a", Job: "j1", Node: "n1", GPUs: []int{1}, Ask: Ask{Shares: 30}, Preemptible: true},
			{ID: "y", Project: "a", Job: "j2", Node: "n1", GPUs: []int{0}, Ask: Ask{WholeGPUs: 1, CPUMilli: 1000}},
		},
	}
	x, err := snap.Index()
	if err != nil {
		t.Fatal(err)
	}
	if x.Free(0, 0) != 0 || x.Free(0, 1) != 70 {
		t.Errorf("free = %v, %v; want 0, 70", x.Free(0, 0), x.Free(0, 1))
	}
	if x.Usage[0] != 130 || x.NonPreemptibleUsage[0] != 100 || x.FreeCPUMilli[0] != 7000 {
		t.Errorf("usage %v, non-preemptible %v, cpu %v", x.Usage[0], x.NonPreemptibleUsage[0], x.FreeCPUMilli[0])
	}
}

func TestIndexRejectsContradictions(t *testing.T) {
	base := func() *Snapshot {
		return &Snapshot{
			Nodes:    []Node{{Name: "n1", CPUMilli: 8000, MemoryMiB: 1000, GPUs: []GPU{{Model: "A100"}, {Model: "A100", Mode: ModeWhole}}}},
			Projects: []Project{{Name: "a"}},
		}
	}
	tests := []struct {
		name  string
		alloc Allocation
		want  string
	}{
		{"unknown project", Allocation{ID: "x", Project: "b", Node: "n1", GPUs: []int{0}, Ask: Ask{Shares: 10}}, "unknown project"},
		{"unknown node", Allocation{ID: "x", Project: "a", Node: "n9", GPUs: []int{0}, Ask: Ask{Shares: 10}}, "unknown node"},
		{"no such GPU", Allocation{ID: "x", Project: "a", Node: "n1", GPUs: []int{2}, Ask: Ask{Shares: 10}}, "has no GPU 2"},
		{"share on whole GPU", Allocation{ID: "x", Project: "a", Node: "n1", GPUs: []int{1}, Ask: Ask{Shares: 10}}, "whole mode"},
		{"negative", Allocation{ID: "x", Project: "a", Node: "n1", GPUs: []int{0}, Ask: Ask{Shares: -10}}, "negative"},
		{"share too big", Allocation{ID: "x", Project: "a", Node: "n1", GPUs: []int{0}, Ask: Ask{Shares: 100}}, "not below one GPU"},
		{"wrong GPU count", Allocation{ID: "x", Project: "a", Node: "n1", GPUs: []int{0}, Ask: Ask{WholeGPUs: 2}}, "needs 2 GPUs"},
		{"cpu", Allocation{ID: "x", Project: "a", Node: "n1", GPUs: []int{0}, Ask: Ask{Shares: 10, CPUMilli: 9000}}, "CPU or memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := base()
			snap.Allocations = []Allocation{tt.alloc}
			_, err := snap.Index()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want ErrInvalid mentioning %q", err, tt.want)
			}
		})
	}
	snap := base()
	snap.Allocations = []Allocation{
		{ID: "x", Project: "a", Node: "n1", GPUs: []int{0}, Ask: Ask{Shares: 60}},
		{ID: "y", Project: "a", Node: "n1", GPUs: []int{0}, Ask: Ask{Shares: 50}},
	}
	if _, err := snap.Index(); err == nil || !strings.Contains(err.Error(), "over-committed") {
		t.Errorf("over-commit error %v", err)
	}
}
