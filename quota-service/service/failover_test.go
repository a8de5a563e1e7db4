package service_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/httpapi"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestLeaderDiesBeforeStopAndTheNeedGoes: the leader records a
// suspension and dies before it stops the job (test hook between record
// and stop); meanwhile the workload it was for goes away. The standby takes
// over and re-plans: it does not stop the job, since the current plan no
// longer needs it, and drops the record ("suspend-abandoned"); the job runs
// throughout. The HTTP API reports who acts.
func TestLeaderDiesBeforeStopAndTheNeedGoes(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "abandon-test")
	h := startHangingLeader(t, s, (*service.Service).SetBeforeStop) // dies before the stop
	q1, q2, stopQ1, a := h.q1, h.q2, h.stopQ1, h.a
	b := gpuJob{ns: "team-b", id: "b-job1", whole: 1}
	s.submit(b)
	rec := h.hookedRecord(t)
	victim := gpuJob{ns: rec.Namespace, id: rec.Job}
	if rec.Phase != state.PhaseStopping {
		t.Fatalf("record %+v, want phase stopping", rec)
	}
	// The need goes while the leader hangs, then the leader dies.
	if _, _, err := c.Nomad.Jobs().Deregister(b.id, true, &nomadapi.WriteOptions{Namespace: b.ns}); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, 30*time.Second, func() error {
		if j, err := s.nomadJob(b.ns, b.id); err != nil || j != nil {
			return fmt.Errorf("%s/%s still registered (%v)", b.ns, b.id, err)
		}
		return nil
	})
	stopQ1()
	testcluster.Eventually(t, 60*time.Second, func() error {
		if l := leaders(q1, q2); len(l) != 1 || l[0] != "q2" {
			return fmt.Errorf("leaders %v, want [q2]", l)
		}
		if r, err := s.records(); err != nil || len(r) != 0 {
			return fmt.Errorf("records %v (%v), want the unfinished one dropped", keys(r), err)
		}
		return nil
	})
	waitCycles(t, q2, 3)
	s.wait(10*time.Second, "still running", isRunning, a...)
	if got := s.historyOf(victim); len(got) != 2 || got[0] != state.EventSuspend || got[1] != state.EventSuspendAbandoned {
		t.Fatalf("history of %s/%s: %v, want [suspend suspend-abandoned]", victim.ns, victim.id, got)
	}
	hist, err := s.store.History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range hist {
		if e.Event == state.EventSuspendAbandoned && e.By != "q2" {
			t.Errorf("abandoned by %s, want q2: %+v", e.By, e)
		}
	}

	srv := httptest.NewServer(httpapi.Handler(q2, q2.Registry()))
	defer srv.Close()
	for path, want := range map[string]string{"/v1/health": `"leader": true`, "/metrics": "gpushare_leader 1", "/v1/status": `"instance": "q2"`, "/": "gpushare quotas"} {
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
}

// TestFailoverBetweenReclaimAndPlacement: the leader suspends two jobs
// for two workloads and dies right after the second stop, before the
// workloads are placed (the victims take 8 s to stop, and Nomad places the
// workloads only then or when re-evaluated). The standby takes over in
// that window with nothing but the records and Nomad's state: it makes no
// extra suspension and resumes nothing while the workloads wait; the
// workloads run, and exactly the two jobs are suspended, once each.
func TestFailoverBetweenReclaimAndPlacement(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "handover-test")
	s.quota("team-a", `{"guaranteed": 2}`)
	s.quota("team-b", `{"guaranteed": 2}`)
	var stops atomic.Int32
	dying := make(chan struct{})
	q1, stopQ1 := s.startInstance("q1", nil, func(svc *service.Service) {
		svc.SetAfterStop(func(ctx context.Context, rec state.Suspension) {
			if stops.Add(1) == 2 {
				close(dying)
				<-ctx.Done()
			}
		})
	})
	waitLeader(t, q1)
	q2, _ := s.startInstance("q2", nil, nil)
	a := jobsOf("team-a", 4, 1)
	for i := range a {
		a[i].slowStop = true
		s.submit(a[i])
	}
	s.wait(90*time.Second, "running", isRunning, a...)
	b := jobsOf("team-b", 2, 1)
	lost := s.watchNothingLost(append(append([]gpuJob(nil), a...), b...))
	for _, j := range b {
		s.submit(j)
	}
	select {
	case <-dying:
	case <-time.After(60 * time.Second):
		t.Fatal("the leader made no two suspensions within 60s")
	}
	stopQ1()
	handover := time.Now()
	testcluster.Eventually(t, 60*time.Second, func() error {
		if l := leaders(q1, q2); len(l) != 1 || l[0] != "q2" {
			return fmt.Errorf("leaders %v, want [q2]", l)
		}
		return nil
	})
	placed := 0
	for _, j := range b {
		if st, err := s.jobState(j.ns, j.id); err == nil && isRunning(st) {
			placed++
		}
	}
	t.Logf("q2 leads %.2fs after q1 died; %d of team-b's jobs run by then", time.Since(handover).Seconds(), placed)
	s.wait(90*time.Second, "running", isRunning, b...)
	waitCycles(t, q2, 5)
	suspended, err := s.suspendedOf(a)
	if err != nil || len(suspended) != 2 {
		t.Fatalf("suspended %v (%v), want 2 of team-a's jobs", suspended, err)
	}
	if n := s.checkOneSuspendPerJob(); n != 2 {
		t.Errorf("%d jobs suspended, want 2: %v", n, s.historyEvents())
	}
	if n := countPrefix(s.historyEvents(), string(state.EventResume)+" "); n != 0 {
		t.Errorf("%d resumes while team-b runs, want none: %v", n, s.historyEvents())
	}
	if v, polls := lost(); len(v) > 0 {
		t.Fatalf("jobs lost at %d of %d polls:\n%s", len(v), polls, strings.Join(v, "\n"))
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
	if r, err := s.records(); err != nil || r[key].Phase != state.PhaseStopping {
		t.Fatalf("records %v (%v): want %s recorded, not stopped yet", r, err, key)
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
		if r, ok := recs[j.ns+"/"+j.id]; !ok || r.Phase != state.PhaseSuspended || !r.Tagged || r.ForProject != "team-b" {
			t.Errorf("record of %s/%s = %+v, want suspended, tagged, for team-b", j.ns, j.id, r)
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

// TestLeaderDiesBetweenStopAndMark: the leader stops a job (Nomad accepted
// the stop) and dies before it tags the stopped version or marks the
// record, which stays "stopping". The standby takes over with the record
// and Nomad's state alone: the stopped version carries the record's
// nonce, so it adopts the stop as the service's (marks and tags it), does
// not stop the job again, and resumes it once the GPUs free up: the job
// is suspended once, resumed once, never abandoned, and never lost.
func TestLeaderDiesBetweenStopAndMark(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "mark-test")
	h := startHangingLeader(t, s, (*service.Service).SetBeforeMark) // dies between the stop and the mark
	q1, q2, stopQ1, a := h.q1, h.q2, h.stopQ1, h.a
	b := gpuJob{ns: "team-b", id: "b-job1", whole: 1}
	lost := s.watchNothingLost(append(append([]gpuJob(nil), a...), b))
	s.submit(b)
	rec := h.hookedRecord(t)
	victim := gpuJob{ns: rec.Namespace, id: rec.Job}
	if got := s.waitRecord(victim, state.PhaseStopping); got.StopNonce == "" {
		t.Fatalf("the record of %s/%s carries no stop nonce", victim.ns, victim.id)
	}
	stopQ1()
	testcluster.Eventually(t, 60*time.Second, func() error {
		if l := leaders(q1, q2); len(l) != 1 || l[0] != "q2" {
			return fmt.Errorf("leaders %v, want [q2]", l)
		}
		return nil
	})
	marked := s.waitRecord(victim, state.PhaseSuspended)
	if !marked.Tagged || marked.By != "q1" {
		t.Errorf("the adopted record: tagged %v, by %q; want tagged, by q1 (the stop's leader)", marked.Tagged, marked.By)
	}
	s.wait(90*time.Second, "running", isRunning, b)
	s.finish(b.ns, b.id)
	s.wait(60*time.Second, "complete", isComplete, b)
	s.wait(90*time.Second, "running again", isRunning, victim)
	if got, want := s.historyOf(victim), []state.Event{state.EventSuspend, state.EventResume}; len(got) < 2 || !slices.Equal(got[:2], want) {
		t.Errorf("history of %s/%s: %v, want %v first (one suspension, adopted, then resumed)", victim.ns, victim.id, got, want)
	}
	if v, polls := lost(); len(v) > 0 {
		t.Fatalf("jobs lost at %d of %d polls:\n%s", len(v), polls, strings.Join(v, "\n"))
	}
}

// hangingLeader is q1 leading, whose actuator hook hands over the first
// record it is called with and then hangs until q1 is stopped, and q2 on
// standby; team-a and team-b are guaranteed 2 GPUs each, and team-a's four
// one-GPU jobs run on every GPU of the cluster.
type hangingLeader struct {
	q1, q2 *service.Service
	stopQ1 func()
	a      []gpuJob
	hooked chan state.Suspension
}

// startHangingLeader starts a hangingLeader whose hook install sets (one
// of the Service's test hooks).
func startHangingLeader(t *testing.T, s *scenario, install func(*service.Service, func(context.Context, state.Suspension))) *hangingLeader {
	t.Helper()
	s.quota("team-a", `{"guaranteed": 2}`)
	s.quota("team-b", `{"guaranteed": 2}`)
	h := &hangingLeader{hooked: make(chan state.Suspension, 1)}
	var once sync.Once
	h.q1, h.stopQ1 = s.startInstance("q1", nil, func(svc *service.Service) {
		install(svc, func(ctx context.Context, rec state.Suspension) {
			first := false
			once.Do(func() { first = true; h.hooked <- rec })
			if first {
				<-ctx.Done()
			}
		})
	})
	waitLeader(t, h.q1)
	h.q2, _ = s.startInstance("q2", nil, nil)
	h.a = jobsOf("team-a", 4, 1)
	for _, j := range h.a {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, h.a...)
	return h
}

// hookedRecord waits for the record the hook was first called with.
func (h *hangingLeader) hookedRecord(t *testing.T) state.Suspension {
	t.Helper()
	select {
	case rec := <-h.hooked:
		return rec
	case <-time.After(60 * time.Second):
		t.Fatal("the leader's hook was not called within 60s")
		return state.Suspension{}
	}
}
