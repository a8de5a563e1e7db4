package service_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	nomadapi "github.com/hashicorp/nomad/api"
)

// groupCount is the count of j's group "main" as Nomad holds it.
func (s *scenario) groupCount(j gpuJob) (int, error) {
	job, err := s.nomadJob(j.ns, j.id)
	if err != nil || job == nil {
		return 0, fmt.Errorf("reading %s/%s: %v", j.ns, j.id, err)
	}
	for _, tg := range job.TaskGroups {
		if *tg.Name == "main" {
			return *tg.Count, nil
		}
	}
	return 0, fmt.Errorf("%s/%s has no group main", j.ns, j.id)
}

// shrinkRecord is the shrink record of j, if any.
func (s *scenario) shrinkRecord(j gpuJob) (*state.Shrink, error) {
	shrinks, bad, err := s.store.Shrinks(s.t.Context())
	if err != nil || len(bad) > 0 {
		return nil, fmt.Errorf("reading shrink records: %v %v", err, bad)
	}
	for _, r := range shrinks {
		if r.Namespace == j.ns && r.Job == j.id {
			return &r, nil
		}
	}
	return nil, nil
}

// shrinkForTeamB gives team-a and team-b 2 GPUs each; team-a's elastic
// group serve (count 4, minimum 2) borrows the whole node, then team-b
// asks for its two. It waits until team-b's jobs run and serve runs at its
// minimum, and returns serve and team-b's jobs.
func shrinkForTeamB(s *scenario, svc *service.Service) (gpuJob, []gpuJob) {
	s.t.Helper()
	s.quota("team-a", `{"guaranteed": 2}`)
	s.quota("team-b", `{"guaranteed": 2}`)
	waitLeader(s.t, svc)
	serve := gpuJob{ns: "team-a", id: "serve", whole: 1, count: 4, groupMeta: map[string]string{nomadwatch.MetaMinCount: "2"}}
	s.submit(serve)
	s.wait(90*time.Second, "running all of itself", runsAll(4), serve)
	b := jobsOf("team-b", 2, 1)
	for _, j := range b {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, b...)
	s.wait(30*time.Second, "running at its minimum", runsAll(2), serve)
	return serve, b
}

// TestElasticShrinksAndGrowsBack: team-a's elastic group (count 4,
// minimum 2) borrows the whole node; team-b, under its guarantee, asks for
// two GPUs. The group shrinks to its minimum (a new job version through
// Nomad's scale endpoint, the scale event saying why) instead of being
// stopped, and keeps running; after a leader failover, it grows back to
// its count when team-b's jobs end.
func TestElasticShrinksAndGrowsBack(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "elastic-test")
	first, stopFirst := s.startInstance("qa", nil, nil)
	serve, b := shrinkForTeamB(s, first)
	if n, err := s.groupCount(serve); err != nil || n != 2 {
		t.Fatalf("serve's count after the reclaim: %d (%v), want 2", n, err)
	}
	if got := s.historyOf(serve); slices.Contains(got, state.EventSuspend) || countEvents(got, state.EventShrink) != 2 {
		t.Errorf("history of serve %v: want two shrinks and no suspension", got)
	}
	rec, err := s.shrinkRecord(serve)
	if err != nil || rec == nil || rec.Phase != state.ShrinkHeld || rec.Groups["main"] != (state.ShrunkGroup{Count: 4, Now: 2}) {
		t.Fatalf("shrink record %+v (%v): want main shrunk from 4 to 2", rec, err)
	}
	scale, _, err := c.Nomad.Jobs().ScaleStatus(serve.id, &nomadapi.QueryOptions{Namespace: serve.ns})
	if err != nil || !slices.ContainsFunc(scale.TaskGroups["main"].Events, func(e nomadapi.ScalingEvent) bool {
		return strings.Contains(e.Message, "gpushare: shrunk to 2 of 4 for team-b/")
	}) {
		t.Errorf("scaling events of serve: %+v (%v); want the service's shrink saying for whom", scale, err)
	}
	testcluster.Eventually(t, 30*time.Second, func() error {
		if st := first.Status(); !slices.ContainsFunc(st.Shrunk, func(j service.ShrunkJob) bool { return j.Job == serve.id }) {
			return fmt.Errorf("status shrunk %+v: want serve", st.Shrunk)
		}
		return nil
	})

	stopFirst()
	second, _ := s.startInstance("qb", nil, nil)
	waitLeader(t, second)
	for _, j := range b {
		s.finish(j.ns, j.id)
	}
	s.wait(120*time.Second, "grown back", runsAll(4), serve)
	if n, err := s.groupCount(serve); err != nil || n != 4 {
		t.Errorf("serve's count after growth: %d (%v), want 4", n, err)
	}
	testcluster.Eventually(t, 30*time.Second, func() error {
		if rec, err := s.shrinkRecord(serve); err != nil || rec != nil {
			return fmt.Errorf("shrink record %+v (%v) after growth: want none", rec, err)
		}
		return nil
	})
	if got := s.historyOf(serve); !slices.Contains(got, state.EventGrow) {
		t.Errorf("history of serve %v: want growth", got)
	}
}

// TestOwnerScaleEndsTheShrink: once the owner scales a shrunk group
// themselves, the service no longer grows it back.
func TestOwnerScaleEndsTheShrink(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "elastic-owner-test")
	svc, _ := s.startInstance("q", nil, nil)
	serve, b := shrinkForTeamB(s, svc)

	three := 3
	if _, _, err := c.Nomad.Jobs().Scale(serve.id, "main", &three, "owner: three is enough", false, nil, &nomadapi.WriteOptions{Namespace: serve.ns}); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, 30*time.Second, func() error {
		if rec, err := s.shrinkRecord(serve); err != nil || rec != nil {
			return fmt.Errorf("shrink record %+v (%v) after the owner's scale: want none", rec, err)
		}
		return nil
	})
	if got := s.historyOf(serve); !slices.Contains(got, state.EventShrinkEnded) {
		t.Errorf("history of serve %v: want the claim ended", got)
	}
	for _, j := range b {
		s.finish(j.ns, j.id)
	}
	s.wait(90*time.Second, "running at the owner's count", runsAll(3), serve)
	waitCycles(t, svc, 5)
	if n, err := s.groupCount(serve); err != nil || n != 3 {
		t.Errorf("serve's count: %d (%v), want the owner's 3", n, err)
	}
}

func countEvents(events []state.Event, e state.Event) int {
	n := 0
	for _, x := range events {
		if x == e {
			n++
		}
	}
	return n
}
