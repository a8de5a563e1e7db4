package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestQueuedJobIsHeldFromAReclaimedRoom (issue 25, docs/design.md, Held
// from a room): team-b, without a guarantee, runs both GPUs of the node
// and has one more whole-GPU job queued in Nomad, which the service
// leaves alone while nothing stops. team-a then submits a job within its
// guarantee: the service suspends one of team-b's jobs for it and holds
// the queued one first, so that Nomad, which would place the older
// queued job first, cannot put it in the room (the soak saw six queued
// jobs take such a room in turn). team-a's job runs; the queued job never
// gets an allocation and stays suspended with its record.
func TestQueuedJobIsHeldFromAReclaimedRoom(t *testing.T) {
	c := testcluster.StartSimNodes(t, 1, 2)
	s := newScenario(t, c, "hold-test")
	s.quota("team-a", `{"guaranteed": 1}`)
	s.quota("team-b", `{"guaranteed": 0}`)
	svc, _ := s.startQuotaService("q", nil)
	waitLeader(t, svc)
	runs := []gpuJob{{ns: "team-b", id: "b-run0", whole: 1}, {ns: "team-b", id: "b-run1", whole: 1}}
	for _, j := range runs {
		s.submit(j)
		s.wait(120*time.Second, "running", isRunning, j)
	}
	queued := gpuJob{ns: "team-b", id: "b-queued", whole: 1}
	s.submit(queued)
	waitCycles(t, svc, 3)
	if recs, err := s.records(); err != nil {
		t.Fatal(err)
	} else if r, ok := recs[queued.ns+"/"+queued.id]; ok {
		t.Fatalf("the queued job was held while nothing stopped: %+v", r)
	}

	a := gpuJob{ns: "team-a", id: "a-1", whole: 1}
	s.submit(a)
	s.wait(180*time.Second, "running", isRunning, a)
	rec := s.waitRecord(queued, state.PhaseSuspended)
	if !strings.HasPrefix(rec.Reason, plan.HoldReason) {
		t.Errorf("the queued job's record says %q, want a hold (%s)", rec.Reason, plan.HoldReason)
	}
	allocs, _, err := s.c.Nomad.Jobs().Allocations(queued.id, true, &nomadapi.QueryOptions{Namespace: queued.ns})
	if err != nil {
		t.Fatal(err)
	}
	for _, al := range allocs {
		t.Errorf("the held job got allocation %s on %s (%s): Nomad placed it in the room", al.ID, al.NodeID, al.ClientStatus)
	}
	hist, err := s.store.History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var stopped []string
	for _, e := range hist {
		if e.Event == state.EventSuspend {
			stopped = append(stopped, e.Job)
		}
	}
	if len(stopped) != 2 || !strings.Contains(strings.Join(stopped, " "), queued.id) {
		t.Errorf("suspensions %v (history %v); want one of team-b's running jobs and the hold of %s", stopped, s.historyEvents(), queued.id)
	}
}
