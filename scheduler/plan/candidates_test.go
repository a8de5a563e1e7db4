package plan

import (
	"fmt"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// clusterShape describes a test cluster: nodes with gpus GPUs each,
// alternating between A100 and H100 in blocks of ten nodes. Project "a"
// takes every GPU of the first full nodes, whole; with slivers, it takes
// 80 shares of each A100 there instead, and that work asks for the A100
// model, while the work on the H100s asks for h100Models. On the nodes
// after the full ones, GPU g of node n has 25*((n+g)%4) shares taken.
type clusterShape struct {
	nodes, gpus, full int
	slivers           bool
	h100Models        []string
}

func (c clusterShape) snapshot() *cluster.Snapshot {
	snap := &cluster.Snapshot{Projects: []cluster.Project{{Name: "a"}, {Name: "b", Guaranteed: 400}}}
	for n := range c.nodes {
		gpuModel := "A100"
		if n/10%2 == 1 {
			gpuModel = "H100"
		}
		node := cluster.Node{Name: fmt.Sprintf("n%03d", n), CPUMilli: 64000, MemoryMiB: 1 << 20, GPUs: make([]cluster.GPU, c.gpus)}
		for g := range node.GPUs {
			node.GPUs[g] = cluster.GPU{Model: gpuModel}
			ask := cluster.Ask{WholeGPUs: 1}
			switch {
			case n >= c.full:
				if ask = (cluster.Ask{Shares: cluster.Shares(25 * ((n + g) % 4))}); ask.Shares == 0 {
					continue
				}
			case c.slivers && gpuModel == "A100":
				ask = cluster.Ask{Shares: 80, Models: []string{"A100"}}
			case c.slivers:
				ask.Models = c.h100Models
			}
			id := fmt.Sprintf("a-%d-%d", n, g)
			snap.Allocations = append(snap.Allocations, cluster.Allocation{ID: id, Project: "a", Job: id, Group: "main",
				Preemptible: true, Ask: ask, Node: node.Name, GPUs: []int{g}, Start: int64(len(snap.Allocations))})
		}
		snap.Nodes = append(snap.Nodes, node)
	}
	return snap
}

// constrainedPolicy is gpushare with the snapshot's work, model
// constraints included, as its expected task mix (PolicyByName leaves the
// constraints out), so that the pool loss weighs in.
func constrainedPolicy(snap *cluster.Snapshot) (placement.Policy, error) {
	var tasks []placement.Task
	add := func(a cluster.Ask, count int) {
		t := placement.TaskOf(a)
		t.Models = a.Models
		for range count {
			tasks = append(tasks, t)
		}
	}
	for _, a := range snap.Allocations {
		add(a.Ask, 1)
	}
	for _, w := range snap.Pending {
		add(w.Ask, w.Count)
	}
	return placement.ByName("gpushare", 1, placement.WithWorkload(placement.NewWorkload(tasks, placement.DefaultCoverage)))
}

func pending(job string, ask cluster.Ask, count int) cluster.Pending {
	return cluster.Pending{Project: "b", Job: job, Group: "main", Preemptible: true, Ask: ask, Count: count, Submit: int64(len(job))}
}

// TestBoundedSearchFindsRoomFarDown: with a bound of 4 candidates, work
// that fits only on the last of 300 nodes is still placed there: the
// search skips the nodes without room instead of giving up after 4.
func TestBoundedSearchFindsRoomFarDown(t *testing.T) {
	snap := clusterShape{nodes: 300, gpus: 2, full: 299}.snapshot()
	snap.Pending = []cluster.Pending{
		pending("whole", cluster.Ask{WholeGPUs: 1}, 1),
		pending("share", cluster.Ask{Shares: 50}, 1),
	}
	for _, policy := range []string{"gpushare", "fgd", "bestfit"} {
		t.Run(policy, func(t *testing.T) {
			pol, err := PolicyByName(policy, 1, snap)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Plan(snap, Options{Policy: pol, PlacementCandidates: 4})
			if err != nil {
				t.Fatal(err)
			}
			placed := map[string]string{}
			for _, a := range res.Actions {
				if a.Kind == Place {
					placed[a.Job] = a.Node
				}
			}
			if placed["whole"] != "n299" || placed["share"] != "n299" {
				t.Errorf("placed %v, want both on n299 (the only node with room); unplaced %v", placed, res.Unplaced)
			}
		})
	}
}

// TestBoundedSearchMatchesUnbounded: where no more nodes fit a workload
// than the bound, the bounded search places exactly as the policy does
// scoring every node: on a cluster smaller than the bound, and on one
// larger than it where only the last nodes have room for the pending work
// and the others keep a sliver of each A100 free. The work asks for GPU
// models, and so does the policy's expected task mix, so gpushare's pool
// loss takes part in the choices: it weighs each model's free capacity
// (the slivers too) and the models' sizes over the whole cluster.
func TestBoundedSearchMatchesUnbounded(t *testing.T) {
	work := []cluster.Pending{
		pending("h100-whole", cluster.Ask{WholeGPUs: 1, Models: []string{"H100"}, CPUMilli: 4000}, 3),
		pending("h100-share", cluster.Ask{Shares: 25, Models: []string{"H100"}}, 6),
		pending("any-share", cluster.Ask{Shares: 50, CPUMilli: 2000}, 5),
		pending("a100-share", cluster.Ask{Shares: 75, Models: []string{"A100"}}, 4),
		pending("any-whole", cluster.Ask{WholeGPUs: 2}, 2),
	}
	tests := []struct {
		name  string
		shape clusterShape
		bound int
	}{
		{name: "cluster smaller than the bound", shape: clusterShape{nodes: 40, gpus: 4}},
		{name: "larger cluster, free slivers outside the candidates",
			shape: clusterShape{nodes: 200, gpus: 4, full: 170, slivers: true, h100Models: []string{"H100"}}, bound: 30},
		{name: "larger cluster, work that may use either model",
			shape: clusterShape{nodes: 200, gpus: 4, full: 170, slivers: true, h100Models: []string{"A100", "H100"}}, bound: 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := tt.shape.snapshot()
			snap.Pending = work
			plan := func(bound int) Result {
				pol, err := constrainedPolicy(snap)
				if err != nil {
					t.Fatal(err)
				}
				res, err := Plan(snap, Options{Policy: pol, PlacementCandidates: bound})
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			bounded, every := plan(tt.bound), plan(-1)
			places := 0
			for i := range max(len(bounded.Actions), len(every.Actions)) {
				var b, e string
				if i < len(bounded.Actions) {
					b = bounded.Actions[i].String()
				}
				if i < len(every.Actions) {
					e = every.Actions[i].String()
					if every.Actions[i].Kind == Place {
						places++
					}
				}
				if b != e {
					t.Errorf("action %d: bounded %q, every node %q", i, b, e)
				}
			}
			if places == 0 {
				t.Fatalf("nothing placed; unplaced %v", every.Unplaced)
			}
		})
	}
}

// samplingPolicy is first fit that declares whether it samples nodes
// itself, under a name no real policy has.
type samplingPolicy struct{ samples bool }

func (samplingPolicy) Name() string         { return "test" }
func (p samplingPolicy) SamplesNodes() bool { return p.samples }
func (samplingPolicy) Place(c *placement.Cluster, t placement.Task) (placement.Choice, bool) {
	for n := range c.Nodes {
		if gpus, ok := c.Fits(n, t); ok {
			return placement.Choice{Node: n, GPUs: gpus}, true
		}
	}
	return placement.Choice{}, false
}

// TestCandidateBound: the bound follows the option and what the policy
// declares (placement.Policy.SamplesNodes), not its name.
func TestCandidateBound(t *testing.T) {
	tests := []struct {
		name   string
		n      int
		policy placement.Policy
		want   int
	}{
		{"first fit", 0, nil, 0},
		{"default", 0, samplingPolicy{}, DefaultPlacementCandidates},
		{"option", 7, samplingPolicy{}, 7},
		{"every node", -1, samplingPolicy{}, 0},
		{"policy samples itself", 7, samplingPolicy{samples: true}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := candidateBound(tt.n, tt.policy); got != tt.want {
				t.Errorf("candidateBound(%d) = %d, want %d", tt.n, got, tt.want)
			}
		})
	}
}

// TestBoundedSearchShowsPools: a bounded placement shows the policy only
// candidates, with the cluster's pools by GPU model and mode as they are
// at that point of the plan.
func TestBoundedSearchShowsPools(t *testing.T) {
	snap := clusterShape{nodes: 12, gpus: 2, full: 11}.snapshot()
	snap.Nodes[11].GPUs[1].Mode = cluster.ModeShared
	snap.Pending = []cluster.Pending{pending("share", cluster.Ask{Shares: 50}, 2)}
	var seen [][]placement.Pool
	spy := &spyPolicy{seen: &seen}
	if _, err := Plan(snap, Options{Policy: spy, PlacementCandidates: 4}); err != nil {
		t.Fatal(err)
	}
	// n000-n009 are A100 and full, n010 is H100 and full; n011 (H100)
	// has GPU 0 in no mode with 75 shares taken and GPU 1 in shared mode,
	// idle, where the first share goes.
	want := [][]placement.Pool{
		{{Model: "A100", GPUs: 20}, {Model: "H100", GPUs: 3, Free: 25}, {Model: "H100", Mode: cluster.ModeShared, GPUs: 1, Free: 100}},
		{{Model: "A100", GPUs: 20}, {Model: "H100", GPUs: 3, Free: 25}, {Model: "H100", Mode: cluster.ModeShared, GPUs: 1, Free: 50}},
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("pools seen %v, want %v", seen, want)
	}
}

// spyPolicy is first fit that records the pools it is shown.
type spyPolicy struct {
	samplingPolicy
	seen *[][]placement.Pool
}

func (p *spyPolicy) Place(c *placement.Cluster, t placement.Task) (placement.Choice, bool) {
	*p.seen = append(*p.seen, append([]placement.Pool(nil), c.Pools...))
	return p.samplingPolicy.Place(c, t)
}
