package nomadwatch

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/state"
	nomadapi "github.com/hashicorp/nomad/api"
)

func TestMinCounts(t *testing.T) {
	job := func(values ...string) *nomadapi.Job {
		j := spec("a", "serve", "nvidia/gpu", 1)
		j.TaskGroups = nil
		for i, v := range values {
			tg := nomadapi.NewTaskGroup(string(rune('a'+i)), 4)
			if v != "-" {
				tg.Meta = map[string]string{MetaMinCount: v}
			}
			j.AddTaskGroup(tg)
		}
		return j
	}
	for _, tc := range []struct {
		name    string
		job     *nomadapi.Job
		want    map[string]int
		wantErr string
	}{
		{name: "none", job: job("-")},
		{name: "two groups", job: job("2", " 1 "), want: map[string]int{"a": 2, "b": 1}},
		{name: "the scaling policy's minimum is higher", job: func() *nomadapi.Job {
			j := job("1")
			j.TaskGroups[0].Scaling = &nomadapi.ScalingPolicy{Min: ptr(int64(3))}
			return j
		}(), want: map[string]int{"a": 3}},
		{name: "zero is no minimum", job: job("0"), wantErr: `task group "a" meta gpushare.min_count = "0": set it to a whole number from 1`},
		{name: "not a number, the other group kept", job: job("two", "3"), want: map[string]int{"b": 3}, wantErr: `"a" meta gpushare.min_count = "two"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := minCounts(tc.job)
			if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("minCounts = %v, want %v", got, tc.want)
			}
			for g, n := range tc.want {
				if got[g] != n {
					t.Errorf("group %s: %d, want %d", g, got[g], n)
				}
			}
		})
	}
}

func TestInstanceOf(t *testing.T) {
	for name, want := range map[string]int{"serve.replicas[3]": 3, "a.b[c][12]": 12, "serve.replicas": 0, "x[-1]": 0, "x[]": 0, "": 0} {
		if got := instanceOf(name); got != want {
			t.Errorf("instanceOf(%q) = %d, want %d", name, got, want)
		}
	}
}

// TestJudgeShrink: a shrink stands only while Nomad shows the job as the
// service's last scale left it; a scale in flight is marked or dropped
// from what Nomad shows; any other change is the owner's.
func TestJudgeShrink(t *testing.T) {
	held := state.Shrink{Namespace: "a", Job: "serve", Phase: state.ShrinkHeld, JobModifyIndex: 20, Version: 4,
		Groups: map[string]state.ShrunkGroup{"g": {Count: 4, Now: 2}}}
	scaling := held
	scaling.Phase, scaling.JobModifyIndex, scaling.Version = state.ShrinkScaling, 10, 3
	job := func(index, version uint64, count int) *JobInfo {
		return &JobInfo{Namespace: "a", ID: "serve", JobModifyIndex: index, Version: version, Status: "running", Groups: map[string]int{"g": count}}
	}
	stopped := job(20, 4, 2)
	stopped.Stop = true
	for _, tc := range []struct {
		name string
		rec  state.Shrink
		job  *JobInfo
		want ShrinkVerdict
	}{
		{"as the service left it", held, job(20, 4, 2), ShrinkStands},
		{"owner re-registered", held, job(30, 5, 2), ShrinkOwnerChanged},
		{"owner scaled", held, job(30, 5, 3), ShrinkOwnerChanged},
		{"owner stopped", held, stopped, ShrinkOwnerChanged},
		{"purged", held, nil, ShrinkOwnerChanged},
		{"scale landed", scaling, job(25, 4, 2), ShrinkLanded},
		{"scale never made", scaling, job(10, 3, 4), ShrinkNotMade},
		{"owner changed before the scale", scaling, job(25, 4, 3), ShrinkOwnerChanged},
		{"two versions on", scaling, job(25, 5, 2), ShrinkOwnerChanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := judgeShrink(tc.rec, tc.job)
			if r.Verdict != tc.want {
				t.Errorf("verdict %d (%s), want %d", r.Verdict, r.Why, tc.want)
			}
			if r.Stands() != (tc.want == ShrinkStands || tc.want == ShrinkLanded) {
				t.Errorf("Stands() = %v", r.Stands())
			}
		})
	}
}

// TestAssembleElastic: an elastic group's allocations carry its minimum
// and instance index; its shrunk instances come back as Shrunk pending
// work while the shrink stands, and not once the owner changed the job.
func TestAssembleElastic(t *testing.T) {
	serve := spec("a", "serve", "nvidia/gpu", 1)
	serve.TaskGroups[0].Count = ptr(2)
	serve.TaskGroups[0].Meta = map[string]string{MetaMinCount: "1"}
	serve.JobModifyIndex = ptr(uint64(20))
	stub := jobStub("a", "serve", 0, false, nil)
	stub.JobModifyIndex = 20
	al := alloc("al1", "a", "serve", "gpu", "GPU-a")
	al.Name = "serve.g[1]"
	rec := state.Shrink{Namespace: "a", Job: "serve", Project: "a", Phase: state.ShrinkHeld, JobModifyIndex: 20, Version: 3,
		Groups: map[string]state.ShrunkGroup{"g": {Count: 4, Now: 2}}, Time: time.Unix(150, 0)}
	in := Inputs{Nodes: []*nomadapi.NodeListStub{node()}, Allocations: []*nomadapi.AllocationListStub{al},
		Jobs: []*nomadapi.JobListStub{stub}, Specs: map[string]*nomadapi.Job{"a/serve": serve}, Shrinks: []state.Shrink{rec}, Now: time.Unix(200, 0)}
	v := Assemble(in)
	if a := v.Snapshot.Allocations; len(a) != 1 || a[0].MinCount != 1 || a[0].Instance != 1 {
		t.Fatalf("allocations %+v: want al1 with minimum 1, instance 1", a)
	}
	var shrunk int
	for _, p := range v.Snapshot.Pending {
		if p.Shrunk && p.Job == "a/serve" && p.Group == "g" && p.MinCount == 1 {
			shrunk += p.Count
		}
	}
	// Nomad places one more (count 2, one live): it waits as usual, not shrunk.
	if shrunk != 2 || v.Jobs["a/serve"].Queued != 1 {
		t.Errorf("pending %+v, queued %d: want 2 shrunk instances and 1 queued", v.Snapshot.Pending, v.Jobs["a/serve"].Queued)
	}

	stub.JobModifyIndex = 30 // the owner registered it again
	v = Assemble(in)
	for _, p := range v.Snapshot.Pending {
		if p.Shrunk {
			t.Errorf("pending %+v after the owner's change: want no shrunk instances", p)
		}
	}
	if r := v.Shrinks["a/serve"]; r == nil || r.Verdict != ShrinkOwnerChanged {
		t.Errorf("shrink %+v: want the owner's change", r)
	}
}

// TestInstancesAboveTheCountAreLeaving: after a scale down and before
// Nomad has stopped them, an elastic group runs more instances than its
// count; the highest Nomad stops hold nothing the plan may make room
// from, so a room a shrink made is not shrunk for again. A group that is
// not elastic keeps every instance it runs (a deployment's canaries run
// above the count and stay).
func TestInstancesAboveTheCountAreLeaving(t *testing.T) {
	cases := []struct {
		name      string
		minCount  string
		count     int
		instances []int
		// nodes, when set, puts each instance on its own node.
		nodes bool
		// versions are the instances' job versions (nil: all 0).
		versions []uint64
		want     []string
	}{
		{"shrunk by one", "1", 1, []int{0, 1}, false, nil, []string{"i0"}},
		{"the highest index leaves, not the newest", "1", 1, []int{1, 0}, false, nil, []string{"i0"}},
		{"at its count", "1", 2, []int{0, 1}, false, nil, []string{"i0", "i1"}},
		{"not elastic", "", 1, []int{0, 1}, false, nil, []string{"i0", "i1"}},
		{"on two nodes", "1", 2, []int{0, 1, 2}, true, nil, []string{"i0", "i1"}},
		// A canary takes an existing instance's index and runs the new
		// version beside the old ones until its deployment is promoted.
		// (c0: the second allocation at index 0.)
		{"a canary deployment", "1", 2, []int{0, 1, 0}, true, []uint64{3, 3, 4}, []string{"c0", "i0", "i1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			serve := spec("a", "serve", "nvidia/gpu", 1)
			serve.TaskGroups[0].Count = ptr(tc.count)
			if tc.minCount != "" {
				serve.TaskGroups[0].Meta = map[string]string{MetaMinCount: tc.minCount}
			}
			in := Inputs{Nodes: []*nomadapi.NodeListStub{node()}, Jobs: []*nomadapi.JobListStub{jobStub("a", "serve", 0, false, nil)},
				Specs: map[string]*nomadapi.Job{"a/serve": serve}, Now: time.Unix(200, 0)}
			if tc.nodes {
				second := node()
				second.ID, second.Name = "n2", "n2"
				in.Nodes = append(in.Nodes, second)
			}
			gpus := []string{"GPU-a", "GPU-b", "GPU-a"}
			seen := map[int]bool{}
			for k, inst := range tc.instances {
				id := fmt.Sprintf("i%d", inst)
				if seen[inst] {
					id = fmt.Sprintf("c%d", inst)
				}
				seen[inst] = true
				al := alloc(id, "a", "serve", "gpu", gpus[k])
				al.Name = fmt.Sprintf("serve.g[%d]", inst)
				al.CreateIndex = uint64(10 + k)
				if tc.nodes && k%2 == 1 {
					al.NodeID = "n2"
				}
				if tc.versions != nil {
					al.JobVersion = tc.versions[k]
				}
				in.Allocations = append(in.Allocations, al)
			}
			var got []string
			for _, al := range Assemble(in).Snapshot.Allocations {
				got = append(got, al.ID)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("allocations in the snapshot %v, want %v", got, tc.want)
			}
		})
	}
}
