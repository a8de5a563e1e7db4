package service_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
)

// runningOn is the node of job j's running allocation, or an error.
func (s *scenario) runningOn(j gpuJob) (string, error) {
	st, err := s.jobState(j.ns, j.id)
	if err != nil {
		return "", err
	}
	if len(st.nodes) == 0 {
		return "", fmt.Errorf("%s/%s has no running allocation", j.ns, j.id)
	}
	return st.nodes[0], nil
}

// TestConsolidationMovesAShare (issue 27, docs/design.md, Consolidation):
// on two nodes of two GPUs, team-a runs a whole GPU on each node, a
// movable half share on node 0 and a fixed half share on node 1. team-b's
// whole-GPU job fits nowhere, and team-a is within its guarantee, so
// nothing may be reclaimed. The service moves the movable share: it
// suspends it, team-b's job runs on the GPU it left, and the moved share
// runs again on node 1, next to the fixed one. Nothing else stops.
func TestConsolidationMovesAShare(t *testing.T) {
	c := testcluster.StartSimNodes(t, 2, 2)
	s := newScenario(t, c, "consolidate-test")
	s.quota("team-a", `{"guaranteed": 4}`)
	s.quota("team-b", `{"guaranteed": 0}`)
	svc, _ := s.startQuotaService("q", func(cfg *service.Config) { cfg.MoveCooldown = time.Second })
	waitLeader(t, svc)
	n0, n1 := c.NodeIDs[0], c.NodeIDs[1]
	wholes := []gpuJob{{ns: "team-a", id: "a-whole0", whole: 1, node: n0}, {ns: "team-a", id: "a-whole1", whole: 1, node: n1}}
	mover := gpuJob{ns: "team-a", id: "a-mover", shares: 50, prefer: n0, meta: map[string]string{"gpushare.movable": "true"}}
	fixed := gpuJob{ns: "team-a", id: "a-fixed", shares: 50, node: n1}
	for _, j := range append(wholes, mover, fixed) {
		s.submit(j)
		s.wait(120*time.Second, "running", isRunning, j)
	}
	if on, err := s.runningOn(mover); err != nil || on != n0 {
		t.Fatalf("the movable share runs on %q (%v), want node 0 (%s): the setup needs it there", on, err, n0)
	}
	waitCycles(t, svc, 2)

	big := gpuJob{ns: "team-b", id: "b-big", whole: 1}
	s.submit(big)
	s.wait(180*time.Second, "running", isRunning, big)
	s.wait(120*time.Second, "running again", isRunning, mover)
	if on, err := s.runningOn(mover); err != nil || on != n1 {
		t.Errorf("the moved share runs on %q (%v), want node 1 (%s)", on, err, n1)
	}
	s.wait(10*time.Second, "running", isRunning, append(wholes, fixed)...)
	hist, err := s.store.History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	suspends := 0
	for _, e := range hist {
		if e.Event != "suspend" {
			continue
		}
		suspends++
		if e.Job != mover.id || !strings.Contains(e.Reason, "moved to make room for team-b/b-big") {
			t.Errorf("suspension of %s/%s (%q); want only the move of %s for team-b/b-big", e.Namespace, e.Job, e.Reason, mover.id)
		}
	}
	if suspends != 1 {
		t.Errorf("%d suspensions in the history %v; want the one move", suspends, s.historyEvents())
	}
}
