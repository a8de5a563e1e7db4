package sim

import (
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

func gpuNode(name string, gpus int) placement.Node {
	n := placement.Node{Name: name, CPUMilli: 64000, FreeCPUMilli: 64000, MemoryMiB: 1 << 20, FreeMemoryMiB: 1 << 20}
	for range gpus {
		n.GPUs = append(n.GPUs, placement.GPU{Model: "T4", Free: cluster.SharesPerGPU})
	}
	return n
}

func TestRunSyntheticOutcomes(t *testing.T) {
	share60 := placement.Task{CPUMilli: 1000, GPUCount: 1, Shares: 60}
	cpuOnly := placement.Task{CPUMilli: 1000}
	whole := placement.Task{CPUMilli: 1000, GPUCount: 1, Shares: 100}
	tests := []struct {
		name  string
		nodes []placement.Node
		tasks []placement.Task
		want  Result
	}{
		{
			// Capacity 2 GPUs. 0.6-GPU shares arrive at 0.6, 1.2, 1.8, 2.4:
			// two fit (one per GPU), the rest do not. At 2.4 >= 100% the
			// allocation is 1.2 (60%); the next would pass 130% (2.6).
			name:  "shares strand slivers",
			nodes: []placement.Node{gpuNode("a", 1), gpuNode("b", 1)},
			tasks: []placement.Task{share60},
			want:  Result{UnallocAtRead: 40, AllocAtStop: 60, Arrived: 4, Placed: 2, Failed: 2, Capacity: 200},
		},
		{
			// A task no node can hold (more CPU than any node) is a failed
			// arrival, as in the paper's simulator: its GPU demand counts as
			// arrived. Arrivals at 1 and 2 GPUs; a third would pass 2.6.
			name:  "task that fits no node fails",
			nodes: []placement.Node{gpuNode("a", 1), gpuNode("b", 1)},
			tasks: []placement.Task{{CPUMilli: 1 << 30, GPUCount: 1, Shares: 100}},
			want:  Result{UnallocAtRead: 100, AllocAtStop: 0, Arrived: 2, Placed: 0, Failed: 2, Capacity: 200},
		},
		{
			// Whole GPUs fill the cluster exactly; CPU-only tasks bring no
			// GPU demand and do not end the run.
			name:  "whole GPUs fill",
			nodes: []placement.Node{gpuNode("a", 2), gpuNode("b", 2)},
			tasks: []placement.Task{whole, cpuOnly},
			want:  Result{UnallocAtRead: 0, AllocAtStop: 100, Capacity: 400},
		},
	}
	for _, tc := range tests {
		for _, name := range placement.Names() {
			w := placement.NewWorkload(tc.tasks, 1)
			p, err := placement.ByName(name, 42, placement.WithWorkload(w))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Run(Config{Nodes: tc.nodes, Tasks: tc.tasks, Policy: p, Seed: 42})
			if err != nil {
				t.Fatalf("%s/%s: %v", tc.name, name, err)
			}
			if tc.want.Arrived == 0 {
				got.Arrived, got.Placed, got.Failed = 0, 0, 0
			}
			if got != tc.want {
				t.Errorf("%s/%s: got %+v, want %+v", tc.name, name, got, tc.want)
			}
		}
	}
}

func TestRunDoesNotChangeInput(t *testing.T) {
	nodes := []placement.Node{gpuNode("a", 2)}
	tasks := []placement.Task{{CPUMilli: 1000, GPUCount: 1, Shares: 30}}
	p, _ := placement.ByName("bestfit", 1)
	if _, err := Run(Config{Nodes: nodes, Tasks: tasks, Policy: p, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if nodes[0].FreeCPUMilli != 64000 || nodes[0].GPUs[0].Free != cluster.SharesPerGPU {
		t.Fatalf("Run changed its input nodes: %+v", nodes[0])
	}
}

func TestRunErrors(t *testing.T) {
	p, _ := placement.ByName("random", 1)
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no policy", Config{Nodes: []placement.Node{gpuNode("a", 1)}, Tasks: []placement.Task{{GPUCount: 1, Shares: 100}}}},
		{"no tasks", Config{Nodes: []placement.Node{gpuNode("a", 1)}, Policy: p}},
		{"no GPU demand", Config{Nodes: []placement.Node{gpuNode("a", 1)}, Tasks: []placement.Task{{CPUMilli: 1}}, Policy: p}},
		{"read after stop", Config{Nodes: []placement.Node{gpuNode("a", 1)}, Tasks: []placement.Task{{GPUCount: 1, Shares: 100}}, Policy: p, ReadAt: 2}},
	}
	for _, tc := range tests {
		if _, err := Run(tc.cfg); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
