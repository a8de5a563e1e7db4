package nomadwatch

import (
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// TestPendingDemand: a group's pending demand is what Nomad will still
// place (its count less the allocations that hold its places), known
// before Nomad evaluates the job; finished work Nomad will not replace
// keeps its place.
func TestPendingDemand(t *testing.T) {
	type al struct {
		client, desired string
		version         uint64
		next            string
	}
	tests := []struct {
		name    string
		typ     string
		count   int
		allocs  []al
		stop    bool
		status  string
		queued  int // the summary's, for system jobs
		resched *nomadapi.ReschedulePolicy
		want    int
	}{
		{name: "registered, not evaluated yet", typ: "batch", count: 2, want: 2},
		{name: "service: one running, one starting", typ: "service", count: 3, allocs: []al{{"running", "run", 3, ""}, {"pending", "run", 3, ""}}, want: 1},
		{name: "batch: one completed", typ: "batch", count: 2, allocs: []al{{"complete", "run", 3, ""}}, want: 1},
		{name: "batch: completed under an older version", typ: "batch", count: 2, allocs: []al{{"complete", "run", 2, ""}}, want: 2},
		{name: "batch: failed past its reschedule policy", typ: "batch", count: 2, allocs: []al{{"failed", "run", 3, ""}},
			resched: &nomadapi.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}, want: 1},
		{name: "failed and replaced", typ: "batch", count: 1, allocs: []al{{"failed", "run", 3, "next"}, {"running", "run", 3, ""}}, want: 0},
		{name: "failed, to be rescheduled", typ: "service", count: 1, allocs: []al{{"failed", "run", 3, ""}},
			resched: &nomadapi.ReschedulePolicy{Unlimited: ptr(true)}, want: 1},
		{name: "service: completed is replaced", typ: "service", count: 1, allocs: []al{{"complete", "run", 3, ""}}, want: 1},
		{name: "stopped by the service (old allocations being stopped)", typ: "batch", count: 1, allocs: []al{{"running", "stop", 3, ""}}, want: 1},
		{name: "stopped job", typ: "batch", count: 2, stop: true, want: 0},
		{name: "finished job", typ: "batch", count: 2, status: "dead", want: 0},
		{name: "system job: the summary's queued", typ: "system", count: 1, queued: 1, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := withIndex(spec("a", "j", "nvidia/gpu", 1), 7)
			sp.Type, sp.TaskGroups[0].Count, sp.TaskGroups[0].ReschedulePolicy = ptr(tt.typ), ptr(tt.count), tt.resched
			stub := jobStub("a", "j", tt.queued, tt.stop, nil)
			stub.Status = tt.status
			var allocs []*nomadapi.AllocationListStub
			for i, a := range tt.allocs {
				allocs = append(allocs, &nomadapi.AllocationListStub{ID: string(rune('A' + i)), Namespace: "a", JobID: "j", TaskGroup: "g",
					ClientStatus: a.client, DesiredStatus: a.desired, JobVersion: a.version, NextAllocation: a.next})
			}
			v := Assemble(Inputs{Jobs: []*nomadapi.JobListStub{stub}, Allocations: allocs, Specs: map[string]*nomadapi.Job{"a/j": sp}, Now: time.Unix(1000, 0)})
			got := 0
			for _, p := range v.Snapshot.Pending {
				got += p.Count
			}
			if got != tt.want {
				t.Fatalf("pending %+v: %d instances, want %d", v.Snapshot.Pending, got, tt.want)
			}
		})
	}
}
