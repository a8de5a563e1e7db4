package nomadwatch

import (
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/state"
	nomadapi "github.com/hashicorp/nomad/api"
)

func TestGangOf(t *testing.T) {
	withGroupMeta := func(meta map[string]string) *nomadapi.Job {
		j := spec("a", "train", "nvidia/gpu", 1)
		j.AddTaskGroup(nomadapi.NewTaskGroup("workers", 3))
		j.TaskGroups[1].Meta = meta
		return j
	}
	withJobMeta := func(meta map[string]string) *nomadapi.Job {
		j := spec("a", "train", "nvidia/gpu", 1)
		j.Meta = meta
		return j
	}
	for _, tc := range []struct {
		name    string
		job     *nomadapi.Job
		want    bool
		wantErr string
	}{
		{name: "no meta", job: spec("a", "train", "nvidia/gpu", 1)},
		{name: "job meta", job: withJobMeta(map[string]string{MetaGang: "true"}), want: true},
		{name: "one group's meta makes the job a gang", job: withGroupMeta(map[string]string{MetaGang: "true"}), want: true},
		{name: "false", job: withJobMeta(map[string]string{MetaGang: "false"})},
		{name: "spaces and case", job: withJobMeta(map[string]string{MetaGang: " TRUE "}), want: true},
		{name: "empty", job: withJobMeta(map[string]string{MetaGang: ""})},
		{name: "bad job value", job: withJobMeta(map[string]string{MetaGang: "yes"}), wantErr: `job meta: gpushare.gang = "yes": set it to "true" or "false"`},
		{name: "bad group value", job: withGroupMeta(map[string]string{MetaGang: "all"}), wantErr: `task group "workers" meta: gpushare.gang = "all"`},
		{name: "nil job", job: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := gangOf(tc.job)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("gangOf = %v, %v; want error containing %q", got, err, tc.wantErr)
				}
				if got {
					t.Error("a job with a bad gang value is a gang")
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("gangOf = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestAssembleMarksGangs: a gang job's running allocations and waiting
// instances are marked, a suspended gang's demand too, other jobs are
// not, and a bad value is a warning that names the key.
func TestAssembleMarksGangs(t *testing.T) {
	gang := spec("a", "gang", "nvidia/gpu", 1)
	gang.Meta = map[string]string{MetaGang: "true"}
	parked := stoppedAt(spec("a", "parked", "nvidia/gpu", 1), 9)
	parked.TaskGroups[0].Meta = map[string]string{MetaGang: "true"}
	bad := spec("b", "bad", "nvidia/gpu", 1)
	bad.Meta = map[string]string{MetaGang: "maybe"}
	in := Inputs{
		Nodes: []*nomadapi.NodeListStub{node()},
		Allocations: []*nomadapi.AllocationListStub{
			alloc("al1", "a", "gang", "gpu", "GPU-a"),
			alloc("al2", "b", "solo", "gpu", "GPU-b"),
		},
		Jobs: []*nomadapi.JobListStub{
			jobStub("a", "gang", 1, false, gang.Meta),
			jobStub("b", "solo", 0, false, nil),
			jobStub("a", "parked", 0, true, nil),
			jobStub("b", "bad", 2, false, bad.Meta),
		},
		Specs: map[string]*nomadapi.Job{"a/gang": gang, "b/solo": spec("b", "solo", "nvidia/gpu", 1), "a/parked": parked, "b/bad": bad},
		Suspensions: []state.Suspension{
			{Namespace: "a", Job: "parked", Phase: state.PhaseSuspended, StopJobModifyIndex: 9, Time: time.Unix(70, 0)},
		},
		Now: time.Unix(200, 0),
	}
	v := Assemble(in)
	for _, al := range v.Snapshot.Allocations {
		if want := al.Job == "a/gang"; al.Gang != want {
			t.Errorf("allocation %s of %s: Gang = %v, want %v", al.ID, al.Job, al.Gang, want)
		}
	}
	gangs := map[string]bool{}
	for _, p := range v.Snapshot.Pending {
		gangs[p.Job] = p.Gang
	}
	want := map[string]bool{"a/gang": true, "a/parked": true, "b/bad": false}
	for job, g := range want {
		if got, ok := gangs[job]; !ok || got != g {
			t.Errorf("pending %s: Gang = %v (listed %v), want %v", job, got, ok, g)
		}
	}
	if !strings.Contains(strings.Join(v.Warnings, "\n"), `job b/bad: job meta: gpushare.gang = "maybe"`) {
		t.Errorf("warnings %q: want one naming b/bad's gpushare.gang", v.Warnings)
	}
}
