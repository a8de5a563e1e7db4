package service_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

// TestReclaimGuaranteedGPUsAndResume: two projects guaranteed 2 GPUs each
// on a 4-GPU node. A runs 4 whole-GPU jobs; B submits 2; two of A's jobs
// are suspended and B's run (the test logs how long it took; the target
// is BenchmarkReclaimLatency's); when B's finish, A's two resume by
// themselves and complete. At every poll every job is pending, running,
// complete or recorded in KV, and the KV history tells the story.
func TestReclaimGuaranteedGPUsAndResume(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "reclaim-test")
	s.quota("team-a", `{"guaranteed": 2}`)
	s.quota("team-b", `{"guaranteed": 2}`)
	svc, _ := s.startQuotaService("q1", nil)
	waitLeader(t, svc)

	a, b := jobsOf("team-a", 4, 1), jobsOf("team-b", 2, 1)
	for _, j := range a {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, a...)
	stop := s.watchNothingLost(append(append([]gpuJob(nil), a...), b...))

	// The latency is a figure to read; its target lives in
	// BenchmarkReclaimLatency.
	latency, suspended := s.reclaim(a, b, 2)
	t.Logf("reclaim: team-b's 2 jobs run %.2fs after submission", latency.Seconds())
	recs, err := s.records()
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range suspended {
		r, ok := recs[j.ns+"/"+j.id]
		if !ok || r.Phase != state.PhaseSuspended || r.ForProject != "team-b" || r.Reason == "" {
			t.Fatalf("record of %s/%s = %+v, want suspended, for team-b, with a reason", j.ns, j.id, r)
		}
	}
	// Still 2 suspended a while later: nothing flaps while B runs.
	for _, j := range b {
		s.finish(j.ns, j.id)
	}
	s.wait(60*time.Second, "complete", isComplete, b...)
	s.wait(60*time.Second, "running again", isRunning, suspended...)
	s.finish("team-a", "")
	s.wait(60*time.Second, "complete", isComplete, a...)
	violations, polls := stop()
	if len(violations) > 0 {
		t.Fatalf("jobs lost at %d of %d polls:\n%s", len(violations), polls, strings.Join(violations, "\n"))
	}
	if polls < 10 {
		t.Fatalf("only %d polls of the nothing-lost invariant", polls)
	}
	testcluster.Eventually(t, 30*time.Second, func() error {
		recs, err := s.records()
		if err != nil {
			return err
		}
		if len(recs) > 0 {
			return fmt.Errorf("suspension records left: %v", keys(recs))
		}
		return nil
	})
	hist := s.historyEvents()
	t.Logf("history:\n%s", strings.Join(hist, "\n"))
	for _, j := range suspended {
		for _, ev := range []state.Event{state.EventSuspend, state.EventResume, state.EventRunningAgain} {
			if n := countPrefix(hist, string(ev)+" "+j.ns+"/"+j.id); n != 1 {
				t.Errorf("history has %d %q entries for %s/%s, want 1", n, ev, j.ns, j.id)
			}
		}
	}
	if n := countPrefix(hist, string(state.EventSuspend)+" "); n != 2 {
		t.Errorf("history has %d suspensions, want 2", n)
	}
	t.Logf("nothing lost over %d polls", polls)
}

// TestReclaimVictimOrder: with two over-quota projects the lower-priority
// one is reclaimed first; at equal priority, the one most over its fair
// share.
func TestReclaimVictimOrder(t *testing.T) {
	c := needCluster(t)
	tests := []struct {
		name string
		// quotas of the two over-quota projects x and y
		quotaX, quotaY string
		// jobs they run (whole GPUs, one each)
		jobsX, jobsY int
		wantVictim   string // namespace the suspended job belongs to
	}{
		{name: "lower priority first", quotaX: `{"guaranteed": 0, "priority": 1}`, quotaY: `{"guaranteed": 0, "priority": 5}`,
			jobsX: 1, jobsY: 3, wantVictim: "team-x"},
		{name: "equal priority: most over fair share", quotaX: `{"guaranteed": 0}`, quotaY: `{"guaranteed": 0}`,
			jobsX: 1, jobsY: 3, wantVictim: "team-y"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScenario(t, c, fmt.Sprintf("order-test-%d", i))
			s.quota("team-x", tt.quotaX)
			s.quota("team-y", tt.quotaY)
			s.quota("team-p", `{"guaranteed": 1}`)
			svc, _ := s.startQuotaService("q", nil)
			waitLeader(t, svc)
			x, y := jobsOf("team-x", tt.jobsX, 1), jobsOf("team-y", tt.jobsY, 1)
			running := append(append([]gpuJob(nil), x...), y...)
			for _, j := range running {
				s.submit(j)
			}
			s.wait(90*time.Second, "running", isRunning, running...)
			latency, suspended := s.reclaim(running, jobsOf("team-p", 1, 1), 1)
			t.Logf("team-p's job runs %.2fs after submission; suspended %s/%s", latency.Seconds(), suspended[0].ns, suspended[0].id)
			if suspended[0].ns != tt.wantVictim {
				t.Fatalf("suspended %s/%s, want a job of %s", suspended[0].ns, suspended[0].id, tt.wantVictim)
			}
		})
	}
}

// TestReclaimWholeGPUFromShareTenants, on the demo's plugin configuration
// (one idle GPU kept in the share family): a project under its guarantee
// that needs a whole GPU gets one held by two 0.5 share tenants (count = 50
// each) of an over-quota project. It runs its own agents.
func TestReclaimWholeGPUFromShareTenants(t *testing.T) {
	needCluster(t)
	c, err := newGPUCluster(demoPluginConfig, "nvidia/gpu", "nvidia/gpu-share")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := newScenario(t, c, "share-test")
	s.quota("team-x", `{"guaranteed": 0}`)   // over quota: its tenants are the victims
	s.quota("team-y", `{"guaranteed": 0.5}`) // one tenant within its guarantee
	s.quota("team-f", `{"guaranteed": 2}`)   // two whole GPUs within its guarantee
	s.quota("team-p", `{"guaranteed": 1}`)   // needs a whole GPU
	svc, _ := s.startQuotaService("q", nil)
	waitLeader(t, svc)

	// The idle node publishes three whole GPUs and one share GPU. X's two
	// tenants fill the share GPU; the plugin then moves an idle GPU to
	// the share family, where Y's tenant lands (leaving room, so no
	// further GPU is kept for shares); F takes the two whole GPUs left.
	x := []gpuJob{{ns: "team-x", id: "x-half1", shares: 50}, {ns: "team-x", id: "x-half2", shares: 50}}
	for _, j := range x {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, x...)
	y := []gpuJob{{ns: "team-y", id: "y-half", shares: 50}}
	s.submit(y[0])
	s.wait(90*time.Second, "running", isRunning, y...)
	f := jobsOf("team-f", 2, 1)
	for _, j := range f {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, f...)
	stop := s.watchNothingLost(append(append(append([]gpuJob(nil), x...), y...), f...))

	start := time.Now()
	p := jobsOf("team-p", 1, 1)
	s.submit(p[0])
	s.wait(90*time.Second, "running", isRunning, p...)
	t.Logf("team-p's whole-GPU job runs %.2fs after submission", time.Since(start).Seconds())
	s.wait(10*time.Second, "still running", isRunning, append(append([]gpuJob(nil), y...), f...)...)
	// Both tenants were suspended for P (one may already be back on the
	// free half of Y's GPU: that is capacity returning, not a flap).
	hist, err := s.store.History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range x {
		n := 0
		for _, e := range hist {
			if e.Event == state.EventSuspend && e.Namespace == j.ns && e.Job == j.id && e.ForWorkload == "team-p/p-job1/main" {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d suspensions of %s/%s for team-p in the history, want 1: %v", n, j.ns, j.id, s.historyEvents())
		}
	}
	// When P finishes, X's tenants come back.
	s.finish("team-p", "")
	s.wait(90*time.Second, "running again", isRunning, x...)
	if violations, polls := stop(); len(violations) > 0 {
		t.Fatalf("jobs lost at %d of %d polls:\n%s", len(violations), polls, strings.Join(violations, "\n"))
	}
}
