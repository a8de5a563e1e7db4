package soak

import (
	"reflect"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

func TestDrainStoppedNamesMigratedAllocationsJobs(t *testing.T) {
	a := func(ns, job, desired, why string) *nomadapi.Allocation {
		return &nomadapi.Allocation{Namespace: ns, JobID: job, DesiredStatus: desired, DesiredDescription: why}
	}
	marked := a("team-c", "j5", "run", "")
	yes := true
	marked.DesiredTransition.Migrate = &yes
	cases := []struct {
		name   string
		allocs []*nomadapi.Allocation
		want   []string
	}{
		{"migrated", []*nomadapi.Allocation{a("team-a", "j2", "stop", "alloc is being migrated"), a("team-a", "j1", "stop", "alloc is being migrated")}, []string{"team-a/j1", "team-a/j2"}},
		{"two allocations of one job", []*nomadapi.Allocation{a("team-a", "j1", "stop", "alloc is being migrated"), a("team-a", "j1", "stop", "alloc is being migrated")}, []string{"team-a/j1"}},
		{"stopped by a job stop (a suspension)", []*nomadapi.Allocation{a("team-b", "j3", "stop", "alloc not needed due to job update")}, nil},
		{"still running", []*nomadapi.Allocation{a("team-b", "j4", "run", "")}, nil},
		{"marked by the drainer, not stopped yet", []*nomadapi.Allocation{marked}, []string{"team-c/j5"}},
	}
	for _, tc := range cases {
		if got := drainStopped(tc.allocs); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
