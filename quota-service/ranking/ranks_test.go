package ranking

import (
	"maps"
	"reflect"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	nomadapi "github.com/hashicorp/nomad/api"
)

// twoNodes is the state the integration test reaches before its second
// share job: node x runs a half-GPU share, node y one whole-GPU job.
func twoNodes() *cluster.Snapshot {
	gpus := []cluster.GPU{{Model: "H100"}, {Model: "H100"}}
	return &cluster.Snapshot{
		Nodes: []cluster.Node{
			{Name: "x", CPUMilli: 8000, MemoryMiB: 16384, GPUs: gpus},
			{Name: "y", CPUMilli: 8000, MemoryMiB: 16384, GPUs: gpus},
		},
		Allocations: []cluster.Allocation{
			{ID: "s1", Project: "p", Job: "s1", Node: "x", GPUs: []int{0}, Ask: cluster.Ask{CPUMilli: 100, MemoryMiB: 64, Shares: 50}},
			{ID: "w1", Project: "p", Job: "w1", Node: "y", GPUs: []int{0}, Ask: cluster.Ask{CPUMilli: 2000, MemoryMiB: 1024, WholeGPUs: 1}},
		},
		Projects: []cluster.Project{{Name: "p"}},
	}
}

func TestComputeRanksSharesWhereTheyFragmentNothing(t *testing.T) {
	r, err := Compute(twoNodes(), nil)
	if err != nil {
		t.Fatal(err)
	}
	share, whole := Prefix+"s50-c1", Prefix+"w1-c2"
	if got, want := r.Keys, []string{share, whole}; !equal(got, want) {
		t.Fatalf("keys = %v, want %v", got, want)
	}
	// A second half share fills x's open GPU: x ranks 1; on y it would
	// open a fresh GPU: 0.
	if r.Nodes["x"][share] != "1" || r.Nodes["y"][share] != "0" {
		t.Errorf("share ranks x=%s y=%s, want x=1 y=0", r.Nodes["x"][share], r.Nodes["y"][share])
	}
	t.Logf("ranks: %v", r.Nodes)
}

func TestComputeSkipsUnavailableNodes(t *testing.T) {
	s := twoNodes()
	s.Nodes[1].Unavailable = "node is draining"
	r, err := Compute(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Nodes["y"]; ok {
		t.Errorf("draining node y ranked: %v", r.Nodes["y"])
	}
	if _, ok := r.Nodes["x"]; !ok {
		t.Error("node x not ranked")
	}
}

func TestDiff(t *testing.T) {
	one, zero := "1", "0"
	for _, tc := range []struct {
		name       string
		have, want map[string]string
		change     map[string]*string
	}{
		{"same", map[string]string{"a": "1"}, map[string]string{"a": "1"}, map[string]*string{}},
		{"changed and new", map[string]string{"a": "1"}, map[string]string{"a": "0", "b": "1"}, map[string]*string{"a": &zero, "b": &one}},
		{"class left", map[string]string{"a": "1", "b": "0"}, map[string]string{"a": "1"}, map[string]*string{"b": nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := diff(tc.have, tc.want)
			if !maps.EqualFunc(got, tc.change, func(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }) {
				t.Errorf("diff = %v, want %v", got, tc.change)
			}
		})
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestComputeRanksCPUOnlyWorkOfRunningJobs(t *testing.T) {
	job := func(id, typ string, stop bool, cpu int) *nomadapi.Job {
		j := nomadapi.NewServiceJob(id, id, "global", 50)
		j.Type, j.Stop = &typ, &stop
		j.AddTaskGroup(group(cpu))
		j.TaskGroups[0].Count = ptr(2)
		return j
	}
	specs := map[string]*nomadapi.Job{
		"web":     job("web", "service", false, 3000),
		"stopped": job("stopped", "service", true, 500),
		"agent":   job("agent", "system", false, 500),
	}
	if got := len(CPUTasks(specs)); got != 2 {
		t.Fatalf("%d CPU-only tasks, want web's 2 (stopped and system jobs left out)", got)
	}
	r, err := Compute(twoNodes(), specs)
	if err != nil {
		t.Fatal(err)
	}
	key := Prefix + "cpu-c4"
	for _, n := range []string{"x", "y"} {
		if _, ok := r.Nodes[n][key]; !ok {
			t.Errorf("node %s has no rank for %s: %v", n, key, r.Nodes[n])
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestRanksFollowTheirInputs: an equal snapshot with specs asking for the
// same CPU-only work (a job registered again unchanged) gives the ranks
// last computed; a snapshot that changed (x's share ended) or new
// CPU-only work gives the ranks computed afresh.
func TestRanksFollowTheirInputs(t *testing.T) {
	web := nomadapi.NewServiceJob("web", "web", "global", 50)
	web.AddTaskGroup(group(3000))
	web.TaskGroups[0].Count = ptr(2)
	again := *web // registered again: a new spec, the same groups
	batch := nomadapi.NewBatchJob("etl", "etl", "global", 50)
	batch.AddTaskGroup(group(500))
	batch.TaskGroups[0].Count = ptr(1)
	freed := twoNodes()
	freed.Allocations = freed.Allocations[1:]
	steps := []struct {
		name  string
		snap  *cluster.Snapshot
		specs map[string]*nomadapi.Job
		same  bool
	}{
		{"first", twoNodes(), map[string]*nomadapi.Job{"web": web}, false},
		{"an equal snapshot, web registered again unchanged", twoNodes(), map[string]*nomadapi.Job{"web": &again}, true},
		{"x's share ended", freed, map[string]*nomadapi.Job{"web": &again}, false},
		{"a CPU-only batch job", freed, map[string]*nomadapi.Job{"web": &again, "etl": batch}, false},
	}
	var last *rankInputs
	for _, st := range steps {
		in, err := rank(st.snap, st.specs, last)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Compute(st.snap, st.specs)
		if err != nil {
			t.Fatal(err)
		}
		if !equal(in.ranks.Keys, want.Keys) || !maps.EqualFunc(in.ranks.Nodes, want.Nodes, maps.Equal) {
			t.Errorf("%s: ranks %v %v, want those computed afresh: %v %v", st.name, in.ranks.Keys, in.ranks.Nodes, want.Keys, want.Nodes)
		}
		if last != nil {
			if reused := reflect.ValueOf(in.ranks.Nodes).Pointer() == reflect.ValueOf(last.ranks.Nodes).Pointer(); reused != st.same {
				t.Errorf("%s: ranks taken from the last computation: %v, want %v", st.name, reused, st.same)
			}
		}
		last = in
	}
}
