package cluster

import (
	"errors"
	"reflect"
	"slices"
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
	if x.Held[0] != 130 || x.NonPreemptibleHeld[0] != 100 || x.FreeCPUMilli[0] != 7000 {
		t.Errorf("usage %v, non-preemptible %v, cpu %v", x.Held[0], x.NonPreemptibleHeld[0], x.FreeCPUMilli[0])
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
		{"negative minimum", Allocation{ID: "x", Project: "a", Node: "n1", GPUs: []int{0}, Ask: Ask{Shares: 10}, MinCount: -1}, "negative minimum"},
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

func TestIndexRejectsContradictoryPending(t *testing.T) {
	tests := []struct {
		name string
		w    Pending
		want string
	}{
		{"negative minimum", Pending{Project: "a", Job: "j", Count: 2, MinCount: -1}, "negative minimum"},
		{"shrunk and suspended", Pending{Project: "a", Job: "j", Count: 1, Shrunk: true, Suspended: true}, "both shrunk and suspended"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := &Snapshot{Projects: []Project{{Name: "a"}}, Pending: []Pending{tt.w}}
			_, err := snap.Index()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want ErrInvalid mentioning %q", err, tt.want)
			}
		})
	}
}

// TestIndexMIGDevices: a MIG device holds its part of a GPU, in capacity
// and in what it can give; a device claiming more than a GPU is refused.
func TestIndexMIGDevices(t *testing.T) {
	snap := &Snapshot{
		Nodes: []Node{{Name: "n1", CPUMilli: 8000, MemoryMiB: 1000, GPUs: []GPU{
			{Model: "A100 MIG 3g.20gb", Mode: ModeMIG, Shares: 42}, {Model: "A100 MIG 1g.5gb", Mode: ModeMIG, Shares: 14}}}},
		Projects:    []Project{{Name: "a"}},
		Allocations: []Allocation{{ID: "x", Project: "a", Node: "n1", GPUs: []int{0}, Ask: Ask{Shares: 42}}},
	}
	x, err := snap.Index()
	if err != nil {
		t.Fatal(err)
	}
	if x.Capacity != 56 || x.Held[0] != 42 || x.Free(0, 0) != 0 || x.Free(0, 1) != 14 {
		t.Errorf("capacity %s, usage %s, free %s and %s; want 0.56, 0.42, 0 and 0.14", x.Capacity, x.Held[0], x.Free(0, 0), x.Free(0, 1))
	}
	snap.Allocations[0].GPUs = []int{1}
	if _, err := snap.Index(); err == nil || !strings.Contains(err.Error(), "over-committed") {
		t.Errorf("0.42 on a 0.14 MIG device: %v", err)
	}
	snap.Allocations = nil
	snap.Nodes[0].GPUs[1].Shares = 101
	if _, err := snap.Index(); !errors.Is(err, ErrInvalid) {
		t.Errorf("a device of 1.01 GPUs: %v", err)
	}
}

// TestIndexUnavailable checks what an unavailable node or GPU contributes:
// no free room, the GPUs its allocations hold as capacity (they count for
// their projects), and no binding checks on an unavailable node.
func TestIndexUnavailable(t *testing.T) {
	snap := &Snapshot{
		Nodes: []Node{
			{Name: "ok", CPUMilli: 8000, MemoryMiB: 1000, GPUs: []GPU{{Model: "A100"}, {Model: "A100", Unavailable: "unhealthy"}}},
			{Name: "drain", CPUMilli: 8000, MemoryMiB: 1000, GPUs: []GPU{{Model: "A100"}, {Model: "A100"}}, Unavailable: "draining"},
		},
		Projects: []Project{{Name: "a"}},
		Allocations: []Allocation{
			{ID: "on-bad-gpu", Project: "a", Job: "j1", Node: "ok", GPUs: []int{1}, Ask: Ask{WholeGPUs: 1}, Preemptible: true},
			{ID: "unbound", Project: "a", Job: "j2", Node: "drain", Ask: Ask{Shares: 50}, Preemptible: true},
		},
	}
	x, err := snap.Index()
	if err != nil {
		t.Fatal(err)
	}
	if x.Free(0, 0) != 100 || x.Free(0, 1) != 0 || x.Free(1, 0) != 0 || x.Free(1, 1) != 0 {
		t.Errorf("free = %v %v %v %v; want 100 0 0 0", x.Free(0, 0), x.Free(0, 1), x.Free(1, 0), x.Free(1, 1))
	}
	if x.Held[0] != 150 {
		t.Errorf("usage %v, want 1.50", x.Held[0])
	}
	// One healthy GPU, plus what allocations hold where nothing else goes.
	if x.Capacity != 250 {
		t.Errorf("capacity %v, want 2.50", x.Capacity)
	}
}

func TestIndexPendingNodes(t *testing.T) {
	nodes := []string{"n2"}
	snap := &Snapshot{
		Nodes:    []Node{{Name: "n1"}, {Name: "n2"}},
		Projects: []Project{{Name: "a"}},
		Pending: []Pending{
			{Project: "a", Job: "any", Count: 1},
			{Project: "a", Job: "n2-only", Count: 1, Nodes: nodes},
			{Project: "a", Job: "n2-too", Count: 1, Nodes: nodes},
			{Project: "a", Job: "none", Count: 1, Nodes: []string{}},
		},
	}
	x, err := snap.Index()
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]bool{{true, true}, {false, true}, {false, true}, {false, false}}
	for w, ok := range want {
		if x.Admits(w, 0) != ok[0] || x.Admits(w, 1) != ok[1] {
			t.Errorf("workload %d admits %v %v, want %v", w, x.Admits(w, 0), x.Admits(w, 1), ok)
		}
	}
	snap.Pending[1].Nodes = []string{"n3"}
	if _, err := snap.Index(); err == nil || !strings.Contains(err.Error(), `unknown node "n3"`) {
		t.Errorf("error %v, want unknown node n3", err)
	}
}

// TestIndexAfterReusesOnlyAnUnchangedRunningCluster: IndexAfter gives
// what Index gives, reusing the last Index's tables only when the nodes,
// allocations, projects and departments are equal; new pending work is
// indexed anew, and its errors are reported.
func TestIndexAfterReusesOnlyAnUnchangedRunningCluster(t *testing.T) {
	last := Synthetic(SyntheticSpec{Nodes: 20, GPUsPerNode: 8, Allocations: 200, Projects: 4, Pending: 10, Seed: 5})
	lastIndex, err := last.Index()
	if err != nil {
		t.Fatal(err)
	}
	change := func(f func(s *Snapshot)) *Snapshot {
		s := *last
		s.Nodes, s.Allocations = slices.Clone(last.Nodes), slices.Clone(last.Allocations)
		s.Pending, s.Projects = slices.Clone(last.Pending), slices.Clone(last.Projects)
		f(&s)
		return &s
	}
	for _, tc := range []struct {
		name   string
		snap   *Snapshot
		reused bool
	}{
		{"equal copies", change(func(*Snapshot) {}), true},
		{"pending work gone", change(func(s *Snapshot) { s.Pending = s.Pending[1:] }), true},
		{"pending work bound to nodes", change(func(s *Snapshot) { s.Pending[0].Nodes = []string{s.Nodes[3].Name} }), true},
		{"an allocation gone", change(func(s *Snapshot) { s.Allocations = s.Allocations[1:] }), false},
		{"a node unavailable", change(func(s *Snapshot) { s.Nodes[0].Unavailable = "down" }), false},
		{"a guarantee changed", change(func(s *Snapshot) { s.Projects[0].Guaranteed++ }), false},
	} {
		got, reused, err := tc.snap.IndexAfter(last, lastIndex)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want, _ := tc.snap.Index()
		if reused != tc.reused || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: reused %t (want %t), equal to Index: %t", tc.name, reused, tc.reused, reflect.DeepEqual(got, want))
		}
	}
	bad := change(func(s *Snapshot) { s.Pending[0].Project = "nobody" })
	if _, _, err := bad.IndexAfter(last, lastIndex); !errors.Is(err, ErrInvalid) {
		t.Errorf("pending work of an unknown project: error %v, want ErrInvalid", err)
	}
	if again, _ := last.Index(); !reflect.DeepEqual(again, lastIndex) {
		t.Error("IndexAfter changed the last Index")
	}
}
