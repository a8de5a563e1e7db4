package service_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
)

// TestStableUnderSteadyDemand: two projects guaranteed 2 GPUs each on the
// 4-GPU node, each with more whole-GPU and share work than fits, all
// long-running. Once the cluster has settled (each project runs 2 whole-GPU
// jobs and no action, no change of the running set and no change of the
// suspension/resume counters for 5 s), nothing is suspended or resumed over
// the leader's next 60 cycles (counted by gpushare_cycle_seconds less
// gpushare_cycle_errors_total, so a busy machine only makes the test
// slower): gpushare_suspensions_total and gpushare_resumes_total stay put,
// the KV history gets no action, and every round of 10 cycles sees the same
// running jobs.
func TestStableUnderSteadyDemand(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "stability-test")
	s.quota("team-a", `{"guaranteed": 2}`)
	s.quota("team-b", `{"guaranteed": 2}`)
	svc, _ := s.startInstance("q", nil, nil)
	waitLeader(t, svc)
	reg := svc.Registry()

	a := jobsOf("team-a", 5, 1)
	b := jobsOf("team-b", 4, 1)
	shares := []gpuJob{{ns: "team-a", id: "a-share", shares: 50}, {ns: "team-b", id: "b-share", shares: 50}}
	for _, j := range a[:4] {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, a[:4]...)
	s.submit(a[4])
	s.submit(shares[0])
	for _, j := range b {
		s.submit(j)
	}
	s.submit(shares[1])
	all := append(append(append([]gpuJob(nil), a...), b...), shares...)
	lost := s.watchNothingLost(all)

	type sig struct {
		running string
		actions int
		counts  float64
	}
	read := func() (sig, error) {
		run, err := s.runningSet(all)
		if err != nil {
			return sig{}, err
		}
		hist, err := s.store.History(context.Background())
		if err != nil {
			return sig{}, err
		}
		return sig{running: strings.Join(run, ","), actions: actions(hist),
			counts: metric(t, reg, "gpushare_suspensions_total", nil) + metric(t, reg, "gpushare_resumes_total", nil)}, nil
	}
	perProject := func(run string) (na, nb int) {
		for _, k := range strings.Split(run, ",") {
			switch {
			case strings.HasPrefix(k, "team-a/a-job"):
				na++
			case strings.HasPrefix(k, "team-b/b-job"):
				nb++
			}
		}
		return
	}
	// Settled: each project runs 2 whole-GPU jobs and nothing changed
	// for 5 s.
	start := time.Now()
	var last sig
	var since time.Time
	testcluster.Eventually(t, 180*time.Second, func() error {
		cur, err := read()
		if err != nil {
			return err
		}
		if cur != last || since.IsZero() {
			last, since = cur, time.Now()
		}
		na, nb := perProject(cur.running)
		if na != 2 || nb != 2 {
			return fmt.Errorf("running %s: team-a %d, team-b %d whole-GPU jobs, want 2 each", cur.running, na, nb)
		}
		if d := time.Since(since); d < 5*time.Second {
			return fmt.Errorf("changed %s ago", d.Round(time.Millisecond))
		}
		return nil
	})
	t.Logf("settled %.1fs after team-b's submission: running %s, %d actions, counters %.0f", time.Since(start).Seconds(), last.running, last.actions, last.counts)

	// 60 more cycles of the leader, in 6 rounds of 10, see no change at
	// any poll.
	watchStart := time.Now()
	for round := 1; round <= 6; round++ {
		target := completedCycles(t, svc) + 10
		testcluster.Eventually(t, 2*time.Minute, func() error {
			cur, err := read()
			if err != nil {
				return err // the agents are busy: poll again
			}
			if cur != last {
				t.Fatalf("round %d (%s after settling): state changed\nfrom %+v\nto   %+v\nhistory since settling: %v", round,
					time.Since(watchStart).Round(time.Millisecond), last, cur, s.entriesBetween(watchStart.Add(-5*time.Second), time.Now()))
			}
			if n := completedCycles(t, svc); n < target {
				return fmt.Errorf("round %d: %d cycles completed, waiting for %d", round, n, target)
			}
			return nil
		})
		st := svc.Status()
		t.Logf("round %d (%.1fs after settling): running %s; pending %v; suspended %v", round, time.Since(watchStart).Seconds(), last.running, st.Pending, st.Suspended)
	}
	if e := s.entriesBetween(watchStart, time.Now()); len(e) > 0 {
		t.Fatalf("history got entries while stable: %v", e)
	}
	if n := s.checkOneSuspendPerJob(); n < 2 {
		t.Errorf("%d jobs suspended in all, want at least team-a's 2", n)
	}
	if v, polls := lost(); len(v) > 0 {
		t.Fatalf("jobs lost at %d of %d polls:\n%s", len(v), polls, strings.Join(v, "\n"))
	}
}
