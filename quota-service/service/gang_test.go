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
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	nomadapi "github.com/hashicorp/nomad/api"
)

// gangJob is a gang of n one-GPU instances in one task group.
func gangJob(ns, id string, n int) gpuJob {
	return gpuJob{ns: ns, id: id, whole: 1, count: n, meta: map[string]string{nomadwatch.MetaGang: "true"}}
}

// instances is the number of instances j runs when all of it runs.
func (j gpuJob) instances() int { return max(j.count, 1) * max(j.groups, 1) }

// oneWholeOtherNone checks that one of two gangs runs all of itself and
// the other holds no GPU (no allocation running or pending), and returns
// the one that runs.
func (s *scenario) oneWholeOtherNone(a, b gpuJob) (gpuJob, gpuJob, error) {
	held := func(j gpuJob) (int, error) {
		allocs, _, err := s.c.Nomad.Jobs().Allocations(j.id, false, &nomadapi.QueryOptions{Namespace: j.ns})
		if err != nil {
			return 0, err
		}
		n := 0
		for _, al := range allocs {
			if al.DesiredStatus == "run" && (al.ClientStatus == "running" || al.ClientStatus == "pending") {
				n++
			}
		}
		return n, nil
	}
	ha, err := held(a)
	if err != nil {
		return gpuJob{}, gpuJob{}, err
	}
	hb, err := held(b)
	if err != nil {
		return gpuJob{}, gpuJob{}, err
	}
	switch {
	case ha == a.instances() && hb == 0:
		return a, b, nil
	case hb == b.instances() && ha == 0:
		return b, a, nil
	}
	return gpuJob{}, gpuJob{}, fmt.Errorf("%s holds %d of %d GPU allocations, %s %d of %d: want one whole and the other none", a.id, ha, a.instances(), b.id, hb, b.instances())
}

// runsAll is the condition of a job that runs all n of its instances.
func runsAll(n int) func(jobState) bool {
	return func(st jobState) bool { return !st.stopped && st.running == n }
}

// TestTwoGangsNeverDeadlock: two gangs of three one-GPU instances on the
// 4-GPU node. However Nomad splits the GPUs between them, after a settle
// one runs whole and the other holds no GPU, suspended with a reason and
// a version tag that say it waits for the whole gang; this holds across a
// leader failover, and the waiting gang comes back whole when the other
// ends.
func TestTwoGangsNeverDeadlock(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "gang-deadlock-test")
	s.quota("team-a", `{"guaranteed": 4}`)
	first, stopFirst := s.startInstance("qa", nil, nil)
	waitLeader(t, first)
	second, _ := s.startInstance("qb", nil, nil)

	g1, g2 := gangJob("team-a", "gang-1", 3), gangJob("team-a", "gang-2", 3)
	s.submit(g1)
	s.submit(g2)
	var whole, waiting gpuJob
	settled := func() error {
		w, other, err := s.oneWholeOtherNone(g1, g2)
		if err != nil {
			return err
		}
		recs, err := s.records()
		if err != nil {
			return err
		}
		rec, ok := recs[other.ns+"/"+other.id]
		if !ok || rec.Phase != state.PhaseSuspended || !strings.HasPrefix(rec.Reason, plan.GangReason) {
			return fmt.Errorf("%s/%s holds no GPU but its record is %+v (recorded %v): want it suspended, waiting for the whole gang", other.ns, other.id, rec, ok)
		}
		if _, ok := recs[w.ns+"/"+w.id]; ok {
			return fmt.Errorf("%s/%s runs whole but has a suspension record", w.ns, w.id)
		}
		whole, waiting = w, other
		return nil
	}
	testcluster.Eventually(t, 120*time.Second, settled)
	t.Logf("%s runs whole; %s waits whole", whole.id, waiting.id)

	rec := s.waitRecord(waiting, state.PhaseSuspended)
	tags, err := s.serviceTags(waiting.ns, waiting.id)
	if tag := tags[rec.StopVersion]; err != nil || !strings.Contains(tag.Name, "gang-of-team-a") || !strings.Contains(tag.Description, "until all of the gang fits") {
		t.Errorf("tag of the waiting gang: %+v (%v); want gang-of-team-a, saying it waits until all of the gang fits", tag, err)
	}
	testcluster.Eventually(t, 30*time.Second, func() error {
		if st := first.Status(); !slices.ContainsFunc(st.Suspended, func(j service.SuspendedJob) bool {
			return j.Job == waiting.id && strings.HasPrefix(j.Reason, plan.GangReason)
		}) {
			return fmt.Errorf("status suspended %+v: want %s waiting for the whole gang", st.Suspended, waiting.id)
		}
		return nil
	})

	stopFirst()
	waitLeader(t, second)
	waitCycles(t, second, 3)
	if err := settled(); err != nil || whole.id == "" {
		t.Fatalf("after the failover: %v", err)
	}

	s.finish(whole.ns, whole.id)
	s.wait(120*time.Second, "running all of itself", runsAll(waiting.instances()), waiting)
	if got := s.historyOf(waiting); !slices.Contains(got, state.EventSuspend) || got[len(got)-1] != state.EventResume {
		t.Errorf("history of %s: %v; want a suspension, then the resume last", waiting.id, got)
	}
}

// TestSuspendedGangSurvivesGCAndComesBackWhole: a gang suspended whole for
// reclaim stays through `nomad system gc` and comes back whole, with the
// contents it had, when the project it made room for is done.
func TestSuspendedGangSurvivesGCAndComesBackWhole(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "gang-gc-test")
	s.quota("team-a", `{"guaranteed": 0}`)
	s.quota("team-b", `{"guaranteed": 2}`)
	svc, _ := s.startInstance("q", nil, nil)
	waitLeader(t, svc)
	gang := gangJob("team-a", "train", 3)
	s.submit(gang)
	s.wait(90*time.Second, "running all of itself", runsAll(3), gang)
	before, err := s.nomadJob(gang.ns, gang.id)
	if err != nil || before == nil {
		t.Fatalf("reading the gang: %v", err)
	}

	b := jobsOf("team-b", 2, 1)
	for _, j := range b {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, b...)
	rec := s.waitRecord(gang, state.PhaseSuspended)
	if rec.ForProject != "team-b" {
		t.Errorf("record %+v: want the gang suspended for team-b", rec)
	}
	testcluster.Eventually(t, 60*time.Second, func() error {
		if err := c.Nomad.System().GarbageCollect(); err != nil {
			return err
		}
		allocs, _, err := c.Nomad.Jobs().Allocations(gang.id, true, &nomadapi.QueryOptions{Namespace: gang.ns})
		if err != nil {
			return err
		}
		for _, al := range allocs {
			if al.ClientStatus == "running" || al.ClientStatus == "pending" {
				return fmt.Errorf("allocation %s of the suspended gang still %s", al.ID, al.ClientStatus)
			}
		}
		return nil
	})
	if err := c.Nomad.System().GarbageCollect(); err != nil {
		t.Fatal(err)
	}
	if job, err := s.nomadJob(gang.ns, gang.id); err != nil || job == nil || !*job.Stop {
		t.Fatalf("the gang after GC: %+v (%v); want it kept, stopped", job, err)
	}

	for _, j := range b {
		s.finish(j.ns, j.id)
	}
	s.wait(120*time.Second, "running all of itself again", runsAll(3), gang)
	after, err := s.nomadJob(gang.ns, gang.id)
	if err != nil || after == nil {
		t.Fatalf("reading the gang: %v", err)
	}
	if err := sameContents(before, after); err != nil {
		t.Errorf("the gang came back changed: %v", err)
	}
	if got := s.historyOf(gang); len(got) < 2 || got[0] != state.EventSuspend || got[len(got)-1] != state.EventResume {
		t.Errorf("history of the gang: %v; want suspend first and resume last", got)
	}
}
