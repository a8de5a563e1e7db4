package service_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestLostEventsRecoveredWithoutStaleActions: the service follows Nomad's
// event stream, and events are lost while the stream stays connected
// (the EventHook drops them). Meanwhile team-a's owner stops two of its
// four jobs, team-b's two pending jobs take the freed GPUs, and then the
// quotas change so that team-b is owed 2 GPUs. On the stale view (team-a
// on 4 GPUs, team-b pending) the service would suspend two of team-a's
// jobs; it checks Nomad's indexes before it plans, lists Nomad again and
// does nothing. A leader whose stream loses nothing finds nothing to
// correct at its periodic resyncs.
func TestLostEventsRecoveredWithoutStaleActions(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "stream-test")
	s.quota("team-a", `{"guaranteed": 4}`)
	s.quota("team-b", `{"guaranteed": 0, "over_quota_weight": 0}`)
	var dropping atomic.Bool
	var dropped atomic.Int64
	var logs lockedBuffer
	svc, stop := s.startInstance("q1", func(cfg *service.Config) {
		cfg.Log = teeLogger(t, "q1", &logs)
		cfg.ResyncInterval = time.Hour // only the index check may recover
		cfg.EventHook = func(evs *nomadapi.Events) bool {
			if dropping.Load() {
				dropped.Add(int64(len(evs.Events)))
				return false
			}
			return true
		}
	}, nil)
	waitLeader(t, svc)
	reg := svc.Registry()

	a, b := jobsOf("team-a", 4, 1), jobsOf("team-b", 2, 1)
	for _, j := range a {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, a...)
	for _, j := range b {
		s.submit(j)
	}
	waitCycles(t, svc, 3) // the service sees team-b pending and not owed anything

	dropping.Store(true)
	indexRelists := metric(t, reg, "gpushare_view_relists_total", map[string]string{"reason": "index"})
	for _, j := range a[:2] {
		if _, _, err := c.Nomad.Jobs().Deregister(j.id, false, &nomadapi.WriteOptions{Namespace: j.ns}); err != nil {
			t.Fatalf("stopping %s/%s: %v", j.ns, j.id, err)
		}
	}
	s.wait(90*time.Second, "running", isRunning, b...)
	if dropped.Load() == 0 {
		t.Fatal("no event was dropped: the test did not exercise lost events")
	}
	s.quota("team-a", `{"guaranteed": 2}`)
	s.quota("team-b", `{"guaranteed": 2}`)
	waitCycles(t, svc, 5)
	if got := metric(t, reg, "gpushare_view_relists_total", map[string]string{"reason": "index"}); got <= indexRelists {
		t.Errorf("no listing for an index the stream did not account for (%v before, %v after)", indexRelists, got)
	}

	dropping.Store(false)
	stop()
	// A new leader that resyncs often finds nothing the stream missed.
	var leaderReads readCounter
	pollReads := readCounter{refuseStream: true}
	svc2, _ := s.startInstance("q2", func(cfg *service.Config) {
		cfg.ResyncInterval = 6 * time.Second
		cfg.Nomad = countedNomad(t, c.NomadAddr, &leaderReads)
	}, nil)
	waitLeader(t, svc2)
	// The figures to read: what a cycle reads from Nomad on the stream's
	// view and without it (an instance refused the stream lists in full
	// every cycle).
	svc3, _ := s.startInstance("q3", func(cfg *service.Config) { cfg.Nomad = countedNomad(t, c.NomadAddr, &pollReads) }, nil)
	waitCycles(t, svc3, 2)
	leaderReads.take()
	pollReads.take()
	relists := func() float64 { return metric(t, svc2.Registry(), "gpushare_view_relists_total", nil) }
	from2, from3, fromRelists := completedCycles(t, svc2), completedCycles(t, svc3), relists()
	waitCycles(t, svc3, 5)
	n2, n3 := completedCycles(t, svc2)-from2, completedCycles(t, svc3)-from3
	lr, lb, ls := leaderReads.take()
	sr, sb, _ := pollReads.take()
	t.Logf("reads per cycle: leader on the event stream %.1f requests, %.0f bytes (+ %d bytes of events; %v full listings) over %d cycles; standby refused the stream, listing in full %.1f requests, %.0f bytes over %d cycles",
		float64(lr)/float64(max(n2, 1)), float64(lb)/float64(max(n2, 1)), ls, relists()-fromRelists, n2, float64(sr)/float64(max(n3, 1)), float64(sb)/float64(max(n3, 1)), n3)
	if n := metric(t, svc3.Registry(), "gpushare_view_relists_total", map[string]string{"reason": "poll"}); n == 0 {
		t.Errorf("the instance refused the stream (403) did not poll")
	}
	testcluster.Eventually(t, 60*time.Second, func() error {
		if got := metric(t, svc2.Registry(), "gpushare_view_relists_total", map[string]string{"reason": "resync"}); got < 2 {
			return fmt.Errorf("%v periodic resyncs, waiting for 2", got)
		}
		return nil
	})
	if n := metric(t, svc2.Registry(), "gpushare_view_resync_corrections_total", nil); n != 0 {
		t.Errorf("the resync corrected %v objects of a view the stream kept", n)
	}

	// Nothing was acted on, or even tried: no record, no history, no
	// action refused by the actuator's own checks (a stale plan picks the
	// jobs the owner stopped), every job as its owner left it.
	if strings.Contains(logs.String(), "action failed") {
		t.Errorf("actions were planned on a stale view and refused by the actuator")
	}
	if hist := s.historyEvents(); len(hist) > 0 {
		t.Errorf("history written on a stale view:\n%s", strings.Join(hist, "\n"))
	}
	recs, err := s.records()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) > 0 {
		t.Errorf("suspension records written on a stale view: %v", keys(recs))
	}
	if n := metric(t, reg, "gpushare_suspensions_total", nil) + metric(t, reg, "gpushare_resumes_total", nil); n != 0 {
		t.Errorf("%v suspensions and resumes, want none", n)
	}
	s.wait(10*time.Second, "running", isRunning, append(append([]gpuJob(nil), a[2:]...), b...)...)
	s.wait(10*time.Second, "stopped by its owner", func(st jobState) bool { return st.stopped && st.running == 0 }, a[:2]...)
}
