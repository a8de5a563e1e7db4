package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/httpapi"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

func startService(t *testing.T, c *localcluster.Cluster, layout kvlayout.Layout, name string) (*service.Service, context.CancelFunc) {
	svc := service.New(service.Config{Nomad: c.Nomad, Consul: c.Consul, Layout: layout, Log: logger(t).Named(name), Instance: name,
		PlanInterval: time.Second, SessionTTL: 10 * time.Second, LockDelay: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(ctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return svc, stop
}

// TestFailoverFinishesRecordedSuspensionOnce: a suspension recorded in KV
// whose job still runs (the old leader died between the record and the
// stop) is completed by the new leader, exactly once. A second instance
// stands by and takes over when the leader stops; the HTTP API reports
// who acts.
func TestFailoverFinishesRecordedSuspensionOnce(t *testing.T) {
	c := needCluster(t)
	layout := kvlayout.New("failover-test")
	store := state.New(c.Consul, layout)
	runSleeper(t, c, "team-f", "victim")
	rec := state.Suspension{Namespace: "team-f", Job: "victim", Project: "team-f", Groups: map[string]int{"main": 1},
		Reason: "reclaim for team-g", ForWorkload: "team-g/w/g", ForProject: "team-g", Time: time.Now(), By: "old-leader"}
	if err := store.PutSuspension(context.Background(), rec); err != nil {
		t.Fatal(err)
	}

	first, stopFirst := startService(t, c, layout, "first")
	second, stopSecond := startService(t, c, layout, "second")
	waitJob(t, c, "team-f", "victim", true)
	testcluster.Eventually(t, 30*time.Second, func() error {
		r := suspension(t, store, "team-f", "victim")
		if r == nil || !r.Stopped {
			return fmt.Errorf("record %+v not marked stopped", r)
		}
		return nil
	})

	leaders := func() (n int, who *service.Service) {
		for _, s := range []*service.Service{first, second} {
			if s.Health().Leader {
				n++
				who = s
			}
		}
		return n, who
	}
	var lead *service.Service
	testcluster.Eventually(t, 30*time.Second, func() error {
		n, who := leaders()
		if n != 1 {
			return fmt.Errorf("%d leaders, want 1", n)
		}
		lead = who
		return nil
	})
	srv := httptest.NewServer(httpapi.Handler(lead, lead.Registry()))
	defer srv.Close()
	for path, want := range map[string]string{"/v1/health": `"leader": true`, "/metrics": "gpushare_leader 1", "/v1/status": `"instance": "` + lead.Status().Instance, "/": "gpushare quotas"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), want) {
			t.Errorf("GET %s: body lacks %q:\n%.600s", path, want, body)
		}
	}

	// Stop whichever leads; the other takes over.
	other, stopLeader := second, stopFirst
	if lead == second {
		other, stopLeader = first, stopSecond
	}
	stopLeader()
	start := time.Now()
	testcluster.Eventually(t, 60*time.Second, func() error {
		if !other.Health().Leader {
			return errors.New("standby has not taken over")
		}
		return nil
	})
	t.Logf("failover took %s", time.Since(start).Round(time.Millisecond))
	// A few cycles later the suspension still happened exactly once.
	waitCycles(t, other, 3)
	if n := history(t, store, "team-f", "victim", state.EventSuspendFinished); n != 1 {
		t.Fatalf("%d suspend-finished entries, want exactly 1", n)
	}
	if r := suspension(t, store, "team-f", "victim"); r == nil || !r.Stopped {
		t.Fatalf("record %+v: want it kept, marked stopped, for the later resume", r)
	}
}

// TestLeaderKilledMidReclaim: the leader records a suspension (KV record
// and history entry) and dies before it stops the job (test hook between
// record and stop). Two ways to die: "stopped", the process ends and
// releases its lock; "session lost", the leader hangs (a zombie) while
// Consul invalidates its session, as after a crash or a partition, and
// wakes up only after the other instance has taken over. Either way the
// standby takes over, finishes the recorded suspension and completes the
// reclaim: team-b's jobs run, exactly 2 of team-a's are suspended, every
// job has at most one "suspend" entry, the hooked job's suspension is
// finished once by the new leader, the zombie does nothing once awake, and
// at every poll every job runs, is pending or complete, or has a KV record.
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
	waitCycles(t, q2, 3)
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
	testcluster.Eventually(t, 30*time.Second, func() error {
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
	testcluster.Eventually(t, 30*time.Second, func() error {
		if h := svc.Health(); !h.OK {
			return fmt.Errorf("health %+v, want ok again", h)
		}
		return nil
	})
}
