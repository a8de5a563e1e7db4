package placement

import "testing"

func TestGPUShareReserveKeepsTheOnlyHostOfLargeTasks(t *testing.T) {
	// Only "big" (128 cores) can take the 120-core 8-GPU tasks. They are
	// 2 tasks in 40, too rare for FGD's common types, but with 24 GPUs
	// free about one is expected before the cluster is full, and only one
	// node can take it.
	var tasks []Task
	for range 38 {
		tasks = append(tasks, whole(8000, 1))
	}
	tasks = append(tasks, whole(120000, 8), whole(120000, 8))
	w := NewWorkload(tasks, DefaultCoverage)
	if len(w.Multi) != 1 || w.Multi[0].GPUCount != 8 {
		t.Fatalf("Workload.Multi = %+v, want the 8-GPU type", w.Multi)
	}
	for _, name := range w.Types {
		if name.GPUCount == 8 {
			t.Fatalf("the 8-GPU type is among the common types %+v: the test needs it rare", w.Types)
		}
	}
	tests := []struct {
		policy string
		// keeps: the one-GPU tasks stay off node 0 and the large task fits.
		keeps bool
	}{
		{"gpushare-reserve", true},
		// Without the reserve the one-GPU tasks take the large node.
		{"gpushare", false},
	}
	for _, tc := range tests {
		t.Run(tc.policy, func(t *testing.T) {
			c := &Cluster{Nodes: []Node{
				node("big", 128000, 1<<20, 8, "G3"), node("mid", 96000, 1<<20, 8, "G2"), node("mid2", 96000, 1<<20, 8, "G2"),
			}}
			p, err := ByName(tc.policy, 1, WithWorkload(w))
			if err != nil {
				t.Fatal(err)
			}
			for i := range 4 {
				ch, ok := p.Place(c, whole(8000, 1))
				if !ok || tc.keeps && ch.Node == 0 {
					t.Fatalf("placement %d: %+v, %v; want a node other than 0", i, ch, ok)
				}
				if err := c.Assign(ch, whole(8000, 1)); err != nil {
					t.Fatal(err)
				}
			}
			if ch, ok := p.Place(c, whole(120000, 8)); ok != tc.keeps || ok && ch.Node != 0 {
				t.Errorf("the large task: %+v, %v; want placed on node 0: %v", ch, ok, tc.keeps)
			}
		})
	}
}

func TestReserveWeighsNothingOnCandidates(t *testing.T) {
	w := NewWorkload([]Task{whole(8000, 1), whole(120000, 8)}, 1)
	r := newReserve(w)
	c := &Cluster{Nodes: []Node{node("big", 128000, 1<<20, 8, "G3")}, Pools: []Pool{{Model: "G3", GPUs: 8, Free: 800}}}
	r.load(c, nil)
	if r.active() {
		t.Errorf("reserve active on a bounded search's candidates: need %v", r.need)
	}
	c.Pools = nil
	r.load(c, nil)
	if !r.active() || r.slots[0] != 1 {
		t.Errorf("reserve on the whole cluster: slots %v need %v; want 1 slot and some need", r.slots, r.need)
	}
}

func TestWorkloadMultiKeepsRareTypes(t *testing.T) {
	var common []Task
	for range 98 {
		common = append(common, whole(8000, 1))
	}
	tests := []struct {
		name  string
		tasks []Task
		// want are the multi-GPU types as GPU count, CPU and weight.
		want []TaskType
	}{
		{"none", common, nil},
		{
			"rare types kept, by CPU ask, weighed among all tasks",
			append(append([]Task{}, common...), whole(120000, 8), whole(88000, 8)),
			[]TaskType{{GPUCount: 8, CPUMilli: 88000, Weight: 0.01}, {GPUCount: 8, CPUMilli: 120000, Weight: 0.01}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWorkload(tc.tasks, DefaultCoverage)
			if len(w.Multi) != len(tc.want) {
				t.Fatalf("Multi = %+v, want %d types", w.Multi, len(tc.want))
			}
			for i, m := range w.Multi {
				want := tc.want[i]
				if m.GPUCount != want.GPUCount || m.CPUMilli != want.CPUMilli || m.Weight != want.Weight {
					t.Errorf("Multi[%d] = %+v, want %d GPUs, %d CPU, weight %v", i, m, want.GPUCount, want.CPUMilli, want.Weight)
				}
			}
			for _, tt := range w.Types {
				if tt.GPUCount > 1 {
					t.Errorf("rare multi-GPU type %+v among the common types", tt)
				}
			}
		})
	}
}
