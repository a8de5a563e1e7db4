package service_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

// TestStableUnderSteadyDemand is issue 5's stability item: two projects
// guaranteed 2 GPUs each on the 4-GPU node, each with more whole-GPU and
// share work than fits, all long-running. Once the cluster has settled
// (each project runs 2 whole-GPU jobs and no action, no change of the
// running set and no change of the suspension/resume counters for 5 s),
// nothing is suspended or resumed for 60 s: gpushare_suspensions_total and
// gpushare_resumes_total stay put, the KV history gets no action, and
// every 10 s round sees the same running jobs.
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

	// 60 s, in 6 rounds of 10 s, polled every 500 ms.
	watchStart := time.Now()
	for round := 1; round <= 6; round++ {
		roundEnd := watchStart.Add(time.Duration(round) * 10 * time.Second)
		for time.Now().Before(roundEnd) {
			cur, err := read()
			if err != nil {
				t.Logf("poll failed (agents busy): %v", err)
			} else if cur != last {
				t.Fatalf("round %d (%s after settling): state changed\nfrom %+v\nto   %+v\nhistory since settling: %v", round,
					time.Since(watchStart).Round(time.Millisecond), last, cur, s.entriesBetween(watchStart.Add(-5*time.Second), time.Now()))
			}
			time.Sleep(500 * time.Millisecond) // observation period, not synchronization
		}
		st := svc.Status()
		t.Logf("round %d: running %s; pending %v; suspended %v", round, last.running, st.Pending, st.Suspended)
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

// TestLeaderKilledMidReclaim is issue 5's failover item: the leader
// records a suspension (KV record and history entry) and dies before it
// stops the job (test hook between record and stop). Two ways to die:
// "stopped", the process ends and releases its lock; "session lost", the
// leader hangs (a zombie) while Consul invalidates its session, as after
// a crash or a partition, and wakes up only after the other instance has
// taken over. Either way the standby takes over, finishes the recorded
// suspension and completes the reclaim: team-b's jobs run, exactly 2 of
// team-a's are suspended, every job has at most one "suspend" entry, the
// hooked job's suspension is finished once by the new leader, the zombie
// does nothing once awake, and at every poll every job runs, is pending or
// complete, or has a KV record.
func TestLeaderKilledMidReclaim(t *testing.T) {
	c := needCluster(t)
	for i, mode := range []string{"stopped", "session lost"} {
		t.Run(mode, func(t *testing.T) {
			leaderDiesMidReclaim(t, c, fmt.Sprintf("leader-kill-test-%d", i), mode == "session lost")
		})
	}
}

func leaderDiesMidReclaim(t *testing.T, c *localcluster.Cluster, root string, zombie bool) {
	s := newScenario(t, c, root)
	s.quota("team-a", `{"guaranteed": 2}`)
	s.quota("team-b", `{"guaranteed": 2}`)
	recorded := make(chan state.Suspension, 1)
	release, awake := make(chan struct{}), make(chan struct{})
	var once sync.Once
	q1, stopQ1 := s.startInstance("q1", nil, func(svc *service.Service) {
		svc.SetBeforeStop(func(ctx context.Context, rec state.Suspension) {
			first := false
			once.Do(func() { first = true; recorded <- rec })
			if !first {
				return
			}
			if zombie {
				<-release // hangs, whatever happens to its lock
				close(awake)
				return
			}
			<-ctx.Done() // hangs until the process is stopped
		})
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	waitLeader(t, q1)
	q2, _ := s.startInstance("q2", nil, nil)
	testcluster.Eventually(t, 30*time.Second, func() error {
		if q2.Status().LastCycle.IsZero() {
			return fmt.Errorf("standby q2 has not observed yet")
		}
		return nil
	})
	if l := leaders(q1, q2); len(l) != 1 || l[0] != "q1" {
		t.Fatalf("leaders %v, want [q1]", l)
	}

	a, b := jobsOf("team-a", 4, 1), jobsOf("team-b", 2, 1)
	for _, j := range a {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, a...)
	lost := s.watchNothingLost(append(append([]gpuJob(nil), a...), b...))
	for _, j := range b {
		s.submit(j)
	}
	var rec state.Suspension
	select {
	case rec = <-recorded:
	case <-time.After(60 * time.Second):
		t.Fatal("the leader recorded no suspension within 60s")
	}
	key := rec.Namespace + "/" + rec.Job
	if r, err := s.records(); err != nil || r[key].Stopped || r[key].Job == "" {
		t.Fatalf("records %v (%v): want %s recorded, not marked stopped", r, err, key)
	}
	if st, err := s.jobState(rec.Namespace, rec.Job); err != nil || !isRunning(st) {
		t.Fatalf("%s: %+v (%v), want it still running when the leader dies", key, st, err)
	}
	killed := time.Now()
	if zombie {
		pair, _, err := c.Consul.KV().Get(s.layout.Leader(), nil)
		if err != nil || pair == nil || pair.Session == "" {
			t.Fatalf("leader key %+v (%v)", pair, err)
		}
		if _, err := c.Consul.Session().Destroy(pair.Session, nil); err != nil {
			t.Fatalf("invalidating q1's session: %v", err)
		}
	} else {
		stopQ1()
	}
	testcluster.Eventually(t, 30*time.Second, func() error {
		if l := leaders(q1, q2); len(l) != 1 || l[0] != "q2" {
			return fmt.Errorf("leaders %v, want [q2]", l)
		}
		return nil
	})
	t.Logf("q2 leads %.2fs after q1 died", time.Since(killed).Seconds())
	var suspended []gpuJob
	testcluster.Eventually(t, 60*time.Second, func() error {
		for _, j := range b {
			st, err := s.jobState(j.ns, j.id)
			if err != nil {
				return err
			}
			if !isRunning(st) {
				return fmt.Errorf("%s/%s not running: %+v", j.ns, j.id, st)
			}
		}
		var err error
		if suspended, err = s.suspendedOf(a); err != nil {
			return err
		}
		if len(suspended) != 2 {
			return fmt.Errorf("%d of team-a's jobs suspended, want 2", len(suspended))
		}
		return nil
	})
	t.Logf("reclaim completed %.2fs after q1 died", time.Since(killed).Seconds())
	if zombie {
		close(release)
		<-awake
	}
	// A few more cycles of the new leader (and the zombie's wake-up)
	// change nothing.
	settled := time.Now()
	testcluster.Eventually(t, 10*time.Second, func() error {
		if q2.Status().LastCycle.Before(settled.Add(time.Second)) {
			return fmt.Errorf("no cycle since")
		}
		return nil
	})
	if again, err := s.suspendedOf(a); err != nil || len(again) != 2 {
		t.Fatalf("suspended %v (%v), want the same 2", again, err)
	}
	hist, err := s.store.History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("history:\n%s", strings.Join(s.historyEvents(), "\n"))
	var finishedBy []string
	for _, e := range hist {
		if e.Event == state.EventSuspendFinished && e.Namespace == rec.Namespace && e.Job == rec.Job {
			finishedBy = append(finishedBy, e.By)
		}
		if e.By == "q1" && e.Time.After(killed) {
			t.Errorf("q1 acted after it died: %+v", e)
		}
	}
	if len(finishedBy) != 1 || finishedBy[0] != "q2" {
		t.Errorf("suspend-finished entries for %s by %v, want one by q2", key, finishedBy)
	}
	if n := s.checkOneSuspendPerJob(); n != 2 {
		t.Errorf("%d jobs have a suspend entry, want 2", n)
	}
	recs, err := s.records()
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range suspended {
		if r, ok := recs[j.ns+"/"+j.id]; !ok || !r.Stopped || r.ForProject != "team-b" {
			t.Errorf("record of %s/%s = %+v, want stopped, for team-b", j.ns, j.id, r)
		}
	}
	if v, polls := lost(); len(v) > 0 {
		t.Fatalf("jobs lost at %d of %d polls:\n%s", len(v), polls, strings.Join(v, "\n"))
	}
}

// TestMalformedQuotaKeepsLastGoodSettings is issue 5's outage item (a): a
// quota document that is not valid JSON is reported (status key, the
// project's line in /v1/status, an error in the log) and the last good
// settings stay in force; fixing it clears the report. The standby shows
// the same read-only view.
func TestMalformedQuotaKeepsLastGoodSettings(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "malformed-test")
	s.quota("team-a", `{"guaranteed": 2}`)
	var logs lockedBuffer
	svc, _ := s.startInstance("q", func(cfg *service.Config) { cfg.Log = teeLogger(t, "q", &logs) }, nil)
	waitLeader(t, svc)
	standby, _ := s.startInstance("standby", nil, nil)
	project := func(src *service.Service) (service.ProjectView, error) {
		for _, p := range src.Status().Projects {
			if p.Project == "team-a" {
				return p, nil
			}
		}
		return service.ProjectView{}, fmt.Errorf("team-a not in %s's status", src.Status().Instance)
	}
	// Both instances hold the good settings before the bad document
	// arrives (a project that was never valid has no line at all).
	testcluster.Eventually(t, 20*time.Second, func() error {
		for _, src := range []*service.Service{svc, standby} {
			p, err := project(src)
			if err != nil || p.Guaranteed != "2.00" {
				return fmt.Errorf("%s: team-a %+v (%v), want guaranteed 2.00", src.Status().Instance, p, err)
			}
		}
		return nil
	})

	s.quota("team-a", `{"guaranteed": 3,`)
	testcluster.Eventually(t, 20*time.Second, func() error {
		for _, src := range []*service.Service{svc, standby} {
			p, err := project(src)
			if err != nil {
				return err
			}
			if p.QuotaError == "" || p.Guaranteed != "2.00" {
				return fmt.Errorf("%s: team-a %+v, want a quota error and guaranteed still 2.00", src.Status().Instance, p)
			}
		}
		pair, _, err := c.Consul.KV().Get(s.layout.QuotaError("team-a"), nil)
		if err != nil || pair == nil {
			return fmt.Errorf("no report at %s (%v)", s.layout.QuotaError("team-a"), err)
		}
		if !strings.Contains(string(pair.Value), `"in_force"`) || !strings.Contains(string(pair.Value), `"guaranteed_shares": 200`) {
			return fmt.Errorf("report lacks the settings in force: %s", pair.Value)
		}
		if !strings.Contains(logs.String(), "quota document rejected") {
			return fmt.Errorf("no error in the log yet")
		}
		return nil
	})
	if h := svc.Health(); !h.OK {
		t.Errorf("health %+v: a rejected document is reported per project, the service still works", h)
	}

	s.quota("team-a", `{"guaranteed": 1}`)
	testcluster.Eventually(t, 20*time.Second, func() error {
		p, err := project(svc)
		if err != nil || p.QuotaError != "" || p.Guaranteed != "1.00" {
			return fmt.Errorf("team-a %+v (%v), want no error and guaranteed 1.00", p, err)
		}
		if pair, _, err := c.Consul.KV().Get(s.layout.QuotaError("team-a"), nil); err != nil || pair != nil {
			return fmt.Errorf("report still at %s (%v)", s.layout.QuotaError("team-a"), err)
		}
		return nil
	})
}

// TestLeaderVerifiesItsLockBeforeActing: a leader whose lock key no longer
// names it (here overwritten; in production a session Consul expired
// while the lock's monitor hung) takes no action and says why, and acts
// again once the key names it.
func TestLeaderVerifiesItsLockBeforeActing(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "lock-check-test")
	s.quota("team-a", `{"guaranteed": 1}`)
	svc, _ := s.startInstance("q", nil, nil)
	waitLeader(t, svc)
	kv := c.Consul.KV()
	pair, _, err := kv.Get(s.layout.Leader(), nil)
	if err != nil || pair == nil || string(pair.Value) != "q" || pair.Session == "" {
		t.Fatalf("leader key %+v (%v): want held by q", pair, err)
	}
	pair.Value = []byte("impostor")
	if _, err := kv.Put(pair, nil); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, 10*time.Second, func() error {
		h := svc.Health()
		if h.OK || !strings.Contains(h.Reason, `held by "impostor"`) {
			return fmt.Errorf("health %+v, want not ok: the lock names another instance", h)
		}
		if metric(t, svc.Registry(), "gpushare_cycle_errors_total", map[string]string{"cause": "leadership"}) == 0 {
			return fmt.Errorf("no leadership cycle error counted")
		}
		return nil
	})
	pair.Value = []byte("q")
	if _, err := kv.Put(pair, nil); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, 10*time.Second, func() error {
		if h := svc.Health(); !h.OK {
			return fmt.Errorf("health %+v, want ok again", h)
		}
		return nil
	})
}
