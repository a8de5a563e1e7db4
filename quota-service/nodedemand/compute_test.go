package nodedemand

import (
	"reflect"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	wire "github.com/gpushare/nomad-gpushare/vocab/nodedemand"
)

func gpuNode(name string, gpus int) cluster.Node {
	n := cluster.Node{Name: name, CPUMilli: 64000, MemoryMiB: 1 << 20, GPUs: make([]cluster.GPU, gpus)}
	for i := range n.GPUs {
		n.GPUs[i] = cluster.GPU{Model: "H100"}
	}
	return n
}

// TestCompute: the demand of each node is what the plan places there,
// through the planner itself: pending whole and share work, resumptions,
// nothing for CPU-only work, and an empty entry for every GPU node.
func TestCompute(t *testing.T) {
	busy := cluster.Allocation{ID: "busy", Project: "a", Job: "busy", Group: "main", Preemptible: true,
		Ask: cluster.Ask{WholeGPUs: 1}, Node: "n1", GPUs: []int{0}, Start: 1}
	tests := []struct {
		name    string
		nodes   []cluster.Node
		allocs  []cluster.Allocation
		pending []cluster.Pending
		want    map[string]wire.Node
	}{
		{name: "idle cluster: every GPU node, no demand", nodes: []cluster.Node{gpuNode("n1", 4), gpuNode("n2", 2), gpuNode("cpu", 0)},
			want: map[string]wire.Node{"n1": {}, "n2": {}}},
		{name: "a four-GPU job and a quarter of one",
			nodes: []cluster.Node{gpuNode("n1", 4), gpuNode("n2", 2)},
			pending: []cluster.Pending{
				{Project: "a", Job: "train", Group: "main", Ask: cluster.Ask{WholeGPUs: 4}, Count: 1, Submit: 1, Preemptible: true},
				{Project: "a", Job: "nb", Group: "main", Ask: cluster.Ask{Shares: 25}, Count: 2, Submit: 2, Preemptible: true},
				{Project: "a", Job: "cpu", Group: "main", Ask: cluster.Ask{CPUMilli: 100}, Count: 1, Submit: 3, Preemptible: true},
			},
			want: map[string]wire.Node{"n1": {Requests: []wire.Request{{Whole: 4}}}, "n2": {Requests: []wire.Request{{Shares: 25}, {Shares: 25}}}}},
		{name: "a resumption goes where the plan puts it", nodes: []cluster.Node{gpuNode("n1", 2)}, allocs: []cluster.Allocation{busy},
			pending: []cluster.Pending{{Project: "a", Job: "back", Group: "main", Ask: cluster.Ask{WholeGPUs: 1}, Count: 1, Suspended: true, Preemptible: true}},
			want:    map[string]wire.Node{"n1": {Requests: []wire.Request{{Whole: 1}}}}},
		{name: "work that fits nowhere: no demand", nodes: []cluster.Node{gpuNode("n1", 2)},
			pending: []cluster.Pending{{Project: "a", Job: "big", Group: "main", Ask: cluster.Ask{WholeGPUs: 3}, Count: 1, Preemptible: true}},
			want:    map[string]wire.Node{"n1": {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := &cluster.Snapshot{Nodes: tt.nodes, Allocations: tt.allocs, Pending: tt.pending, Projects: []cluster.Project{{Name: "a", Guaranteed: 800}}}
			res, err := plan.Plan(snap, plan.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := Compute(snap, res)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("demand %+v, want %+v (actions %v)", got, tt.want, res.Actions)
			}
		})
	}
}
