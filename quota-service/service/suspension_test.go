package service_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// suspendSome runs four jobs of team-a (each with meta) and n of team-b,
// with team-a guaranteed 4-n GPUs and team-b n, so that n of team-a's
// jobs are suspended. It returns team-a's jobs, team-b's, the suspended
// ones and team-a's jobs as Nomad held them before (by "namespace/job").
func suspendSome(s *scenario, svc *service.Service, n int) (a, b, suspended []gpuJob, before map[string]*nomadapi.Job) {
	s.t.Helper()
	s.quota("team-a", fmt.Sprintf(`{"guaranteed": %d}`, 4-n))
	s.quota("team-b", fmt.Sprintf(`{"guaranteed": %d}`, n))
	waitLeader(s.t, svc)
	a, b = jobsOf("team-a", 4, 1), jobsOf("team-b", n, 1)
	for i := range a {
		a[i].meta = map[string]string{"owner": "alice", "run": a[i].id}
		s.submit(a[i])
	}
	s.wait(90*time.Second, "running", isRunning, a...)
	before = map[string]*nomadapi.Job{}
	for _, j := range a {
		job, err := s.nomadJob(j.ns, j.id)
		if err != nil || job == nil {
			s.t.Fatalf("reading %s/%s: %v", j.ns, j.id, err)
		}
		before[j.ns+"/"+j.id] = job
	}
	_, suspended = s.reclaim(a, b, n)
	for _, j := range suspended {
		s.waitRecord(j, state.PhaseSuspended)
	}
	return a, b, suspended, before
}

// comeBackIntact finishes team-b's jobs and waits until the suspended
// jobs run again with the contents they had before; their history is
// suspend, then the events of between (if any), then resume.
func comeBackIntact(s *scenario, b, suspended []gpuJob, before map[string]*nomadapi.Job, between ...state.Event) {
	s.t.Helper()
	for _, j := range b {
		s.finish(j.ns, j.id)
	}
	s.wait(90*time.Second, "running again", isRunning, suspended...)
	for _, j := range suspended {
		job, err := s.nomadJob(j.ns, j.id)
		if err != nil || job == nil {
			s.t.Fatalf("reading %s/%s: %v", j.ns, j.id, err)
		}
		if err := sameContents(before[j.ns+"/"+j.id], job); err != nil {
			s.t.Errorf("%s/%s came back changed: %v", j.ns, j.id, err)
		}
		want := append(append([]state.Event{state.EventSuspend}, between...), state.EventResume)
		if got := s.historyOf(j); len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
			s.t.Errorf("history of %s/%s: %v, want %v first", j.ns, j.id, got, want)
		}
	}
	testcluster.Eventually(s.t, 30*time.Second, func() error {
		for _, j := range suspended {
			if tags, err := s.serviceTags(j.ns, j.id); err != nil || len(tags) > 0 {
				return fmt.Errorf("%s/%s still carries the service's tags %v (%v)", j.ns, j.id, tags, err)
			}
		}
		return nil
	})
}

// TestSuspendedJobsSurviveGarbageCollection: Nomad's garbage collector
// purges stopped jobs (`nomad system gc` at once, job_gc_threshold after
// their stop). A suspended job's stopped version carries the service's tag,
// which keeps it from collection and tells its owner in `nomad job
// history` who took the GPUs and why; a job whose tagging failed is
// collected, and comes back from the record's spec. Either way it comes
// back intact (same tasks, meta and version contents) when capacity
// returns.
func TestSuspendedJobsSurviveGarbageCollection(t *testing.T) {
	c := needCluster(t)
	t.Run("nomad system gc", func(t *testing.T) {
		s := newScenario(t, c, "gc-test")
		var once sync.Once
		untagged := ""
		svc, _ := s.startInstance("q", nil, func(svc *service.Service) {
			svc.SetSkipTag(func(rec state.Suspension) bool {
				once.Do(func() { untagged = rec.Key() })
				return rec.Key() == untagged
			})
		})
		_, b, suspended, before := suspendSome(s, svc, 2)
		var tagged, plain gpuJob
		for _, j := range suspended {
			if j.ns+"/"+j.id == untagged {
				plain = j
			} else {
				tagged = j
			}
		}
		if plain.id == "" || tagged.id == "" {
			t.Fatalf("suspended %v, untagged %q: want one tagged and one untagged", suspended, untagged)
		}
		rec := s.waitRecord(tagged, state.PhaseSuspended)
		tags, err := s.serviceTags(tagged.ns, tagged.id)
		if err != nil || tags[rec.StopVersion].Name != rec.Tag || !strings.Contains(tags[rec.StopVersion].Description, "team-b") {
			t.Fatalf("tags of %s/%s: %+v (%v); want %s on the stopped version %d, naming team-b", tagged.ns, tagged.id, tags, err, rec.Tag, rec.StopVersion)
		}
		t.Logf("nomad job history shows on version %d: %s: %s", rec.StopVersion, rec.Tag, tags[rec.StopVersion].Description)

		// GC until the untagged job is gone (its allocations must be
		// terminal first); the tagged one stays.
		testcluster.Eventually(t, 60*time.Second, func() error {
			if err := c.Nomad.System().GarbageCollect(); err != nil {
				return err
			}
			if job, err := s.nomadJob(plain.ns, plain.id); err != nil || job != nil {
				return fmt.Errorf("untagged %s/%s not collected yet (%v)", plain.ns, plain.id, err)
			}
			return nil
		})
		if job, err := s.nomadJob(tagged.ns, tagged.id); err != nil || job == nil || !*job.Stop {
			t.Fatalf("tagged %s/%s after GC: %+v (%v), want it kept, stopped", tagged.ns, tagged.id, job, err)
		}
		waitCycles(t, svc, 3)
		if r := s.waitRecord(plain, state.PhaseSuspended); r.Tagged {
			t.Fatalf("record of the collected job %+v, want it kept, untagged", r)
		}
		comeBackIntact(s, b, suspended, before)
	})

	t.Run("job_gc_threshold", func(t *testing.T) {
		gc, err := newGPUClusterWith(wholeOnlyPluginConfig, func(o *localcluster.Options) { o.JobGCThreshold = 3 * time.Second }, "nvidia/gpu")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { gc.Close() })
		s := newScenario(t, gc, "gc-threshold-test")
		svc, _ := s.startInstance("q", nil, nil)
		_, b, suspended, before := suspendSome(s, svc, 2)
		// A stopped job of the test's own, untagged, shows when the
		// collector has run past the threshold.
		marker := gpuJob{ns: "team-a", id: "gc-marker"} // CPU only
		s.finish(marker.ns, marker.id)
		s.submit(marker)
		s.wait(90*time.Second, "complete", isComplete, marker)
		if _, _, err := gc.Nomad.Jobs().Deregister(marker.id, false, &nomadapi.WriteOptions{Namespace: marker.ns}); err != nil {
			t.Fatal(err)
		}
		testcluster.Eventually(t, 90*time.Second, func() error {
			if job, err := s.nomadJob(marker.ns, marker.id); err != nil || job != nil {
				return fmt.Errorf("stopped %s/%s not collected yet (%v)", marker.ns, marker.id, err)
			}
			return nil
		})
		for _, j := range suspended {
			if job, err := s.nomadJob(j.ns, j.id); err != nil || job == nil {
				t.Fatalf("suspended %s/%s after the collector ran: %+v (%v), want it kept", j.ns, j.id, job, err)
			}
		}
		comeBackIntact(s, b, suspended, before)
	})
}

// TestForgedRecordsAreReportedNotActedOn: a record Nomad does not
// corroborate is never acted on. A record for a job without GPUs in
// another namespace (what a KV writer could forge to stop any job) and a
// record whose key names another job than its body stop nothing, are left
// in place, and are reported: /v1/status record_errors, a key each under
// <root>/status/record-errors/, gpushare_record_errors.
func TestForgedRecordsAreReportedNotActedOn(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "forged-test")
	s.quota("team-a", `{"guaranteed": 4}`)
	runSleeper(t, c, "team-x", "web")
	gpu := gpuJob{ns: "team-a", id: "a-job1", whole: 1}
	s.submit(gpu)
	s.wait(90*time.Second, "running", isRunning, gpu)
	web, err := s.nomadJob("team-x", "web")
	if err != nil || web == nil {
		t.Fatal(err)
	}
	forged := []struct{ ns, job, body string }{
		// As convincing as a forger can make it: the job's own version
		// and index.
		{"team-x", "web", fmt.Sprintf(`{"namespace":"team-x","job":"web","project":"team-x","phase":"stopping","version":%d,"job_modify_index":%d,"time":%q}`,
			*web.Version, *web.JobModifyIndex, time.Now().UTC().Format(time.RFC3339))},
		// The key names a GPU job, the body another job.
		{"team-a", "a-job1", `{"namespace":"team-x","job":"web","project":"team-x","phase":"suspended","stop_job_modify_index":1}`},
	}
	for _, f := range forged {
		if _, err := c.Consul.KV().Put(&consulapi.KVPair{Key: s.layout.Suspension(f.ns, f.job), Value: []byte(f.body)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	svc, _ := s.startInstance("q", nil, nil)
	waitLeader(t, svc)
	testcluster.Eventually(t, 30*time.Second, func() error {
		got := map[string]bool{}
		for _, e := range svc.Status().RecordErrors {
			got[e.Key] = true
		}
		for _, f := range forged {
			if k := s.layout.Suspension(f.ns, f.job); !got[k] {
				return fmt.Errorf("status record errors %+v lack %s", svc.Status().RecordErrors, k)
			}
			if pair, _, err := c.Consul.KV().Get(s.layout.RecordError(f.ns, f.job), nil); err != nil || pair == nil {
				return fmt.Errorf("no record-error key for %s/%s (%v)", f.ns, f.job, err)
			}
		}
		if n := metric(t, svc.Registry(), "gpushare_record_errors", nil); n != 2 {
			return fmt.Errorf("gpushare_record_errors %v, want 2", n)
		}
		return nil
	})
	waitCycles(t, svc, 5)
	waitJob(t, c, "team-x", "web", false)
	s.wait(10*time.Second, "running", isRunning, gpu)
	for _, f := range forged {
		pair, _, err := c.Consul.KV().Get(s.layout.Suspension(f.ns, f.job), nil)
		if err != nil || pair == nil || string(pair.Value) != f.body {
			t.Errorf("forged record %s/%s changed or gone: %+v (%v)", f.ns, f.job, pair, err)
		}
	}
	if h := s.historyEvents(); len(h) > 0 {
		t.Errorf("history %v, want no action", h)
	}
	for _, e := range svc.Status().RecordErrors {
		t.Logf("reported: %s: %s", e.Key, e.Reason)
	}
}

// TestOwnersWordWins: the owner of a suspended job decides. Stopped by
// its owner (`nomad job stop`), it stays stopped and is not resumed;
// purged, its suspension is cancelled and it is not registered again;
// registered again in a new version, the record closes as superseded and
// the owner's version runs under the normal rules. Each case is recorded
// in the history, and the service's tag is removed.
func TestOwnersWordWins(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "owner-test")
	svc, _ := s.startInstance("q", nil, nil)
	_, b, suspended, _ := suspendSome(s, svc, 3)
	stopped, purged, renewed := suspended[0], suspended[1], suspended[2]
	wo := func(j gpuJob) *nomadapi.WriteOptions { return &nomadapi.WriteOptions{Namespace: j.ns} }
	if _, _, err := c.Nomad.Jobs().Deregister(stopped.id, false, wo(stopped)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Nomad.Jobs().Deregister(purged.id, true, wo(purged)); err != nil {
		t.Fatal(err)
	}
	job, err := s.nomadJob(renewed.ns, renewed.id)
	if err != nil || job == nil {
		t.Fatal(err)
	}
	job.Stop, job.VersionTag, job.Meta = ptr(false), nil, map[string]string{"owner": "changed it"}
	if _, _, err := c.Nomad.Jobs().Register(job, wo(renewed)); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		j gpuJob
		e state.Event
	}{{stopped, state.EventOwnerStopped}, {purged, state.EventOwnerPurged}, {renewed, state.EventSuperseded}}
	testcluster.Eventually(t, 30*time.Second, func() error {
		recs, err := s.records()
		if err != nil {
			return err
		}
		for _, w := range want {
			if _, ok := recs[w.j.ns+"/"+w.j.id]; ok {
				return fmt.Errorf("record of %s/%s still there", w.j.ns, w.j.id)
			}
			if got := s.historyOf(w.j); len(got) != 2 || got[1] != w.e {
				return fmt.Errorf("history of %s/%s: %v, want suspend then %s", w.j.ns, w.j.id, got, w.e)
			}
		}
		return nil
	})
	// Capacity returns: the owner's version runs, nothing else comes back.
	for _, j := range b {
		s.finish(j.ns, j.id)
	}
	s.wait(90*time.Second, "running", isRunning, renewed)
	waitCycles(t, svc, 5)
	if job, err := s.nomadJob(renewed.ns, renewed.id); err != nil || job.Meta["owner"] != "changed it" {
		t.Fatalf("%s/%s runs %+v (%v), want the owner's version", renewed.ns, renewed.id, job, err)
	}
	if st, err := s.jobState(stopped.ns, stopped.id); err != nil || !st.stopped || st.running > 0 {
		t.Fatalf("%s/%s: %+v (%v), want it still stopped", stopped.ns, stopped.id, st, err)
	}
	if job, err := s.nomadJob(purged.ns, purged.id); err != nil || job != nil {
		t.Fatalf("%s/%s: %+v (%v), want it still purged", purged.ns, purged.id, job, err)
	}
	for _, j := range []gpuJob{stopped, renewed} {
		if tags, err := s.serviceTags(j.ns, j.id); err != nil || len(tags) > 0 {
			t.Errorf("%s/%s still carries the service's tags %v (%v)", j.ns, j.id, tags, err)
		}
	}
	if n := countPrefix(s.historyEvents(), string(state.EventResume)+" "); n != 0 {
		t.Errorf("%d resumes, want none: %v", n, s.historyEvents())
	}
}

// pauseEvaluations pauses or resumes Nomad's evaluation broker: while it
// is paused, Nomad registers jobs but evaluates none, as it is slow to
// evaluate right after a restart.
func pauseEvaluations(t *testing.T, c *localcluster.Cluster, pause bool) {
	t.Helper()
	cfg, _, err := c.Nomad.Operator().SchedulerGetConfiguration(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.SchedulerConfig.PauseEvalBroker = pause
	if _, _, err := c.Nomad.Operator().SchedulerSetConfiguration(cfg.SchedulerConfig, nil); err != nil {
		t.Fatal(err)
	}
}

// TestResumeHoldsItsGPUsBeforeNomadEvaluatesIt: a job the service
// registers again holds its GPUs in the plan from the moment it is
// registered, before Nomad evaluates it (Nomad writes a job summary's
// queued count only when an evaluation completes, so a job registered
// and not yet evaluated shows neither queued work nor allocations). With
// Nomad's evaluation broker paused, one freed GPU resumes exactly one
// suspended job, however many cycles pass; once Nomad evaluates, that job
// runs, the other stays suspended, and nothing is suspended twice.
func TestResumeHoldsItsGPUsBeforeNomadEvaluatesIt(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "slow-eval-test")
	svc, _ := s.startInstance("q", nil, nil)
	_, b, suspended, _ := suspendSome(s, svc, 2)

	pauseEvaluations(t, c, true)
	t.Cleanup(func() { pauseEvaluations(t, c, false) })
	s.finish(b[0].ns, b[0].id)
	s.wait(60*time.Second, "complete", isComplete, b[0])
	registered := func() []string {
		var out []string
		for _, j := range suspended {
			if st, err := s.jobState(j.ns, j.id); err == nil && !st.stopped {
				out = append(out, j.id)
			}
		}
		return out
	}
	testcluster.Eventually(t, 60*time.Second, func() error {
		if r := registered(); len(r) != 1 {
			return fmt.Errorf("registered again: %v, want one job for the one free GPU", r)
		}
		return nil
	})
	waitCycles(t, svc, 10)
	if r := registered(); len(r) != 1 {
		t.Fatalf("after 10 more cycles without evaluations, registered again: %v; want one job for the one free GPU", r)
	}

	pauseEvaluations(t, c, false)
	var resumed, waiting gpuJob
	for _, j := range suspended {
		if r := registered(); r[0] == j.id {
			resumed = j
		} else {
			waiting = j
		}
	}
	s.wait(90*time.Second, "running", isRunning, resumed)
	waitCycles(t, svc, 5)
	if st, err := s.jobState(waiting.ns, waiting.id); err != nil || !st.stopped {
		t.Fatalf("%s/%s: %+v (%v), want it still suspended", waiting.ns, waiting.id, st, err)
	}
	if n := s.checkOneSuspendPerJob(); n != 2 {
		t.Errorf("%d jobs suspended, want 2", n)
	}
}

// TestRecordPhasesAreReadFromNomad: a record whose phase write failed is
// set right from what Nomad shows, never acted on blindly. A suspension
// whose "suspended" mark was lost (the record still says "stopping") is
// marked from the service's tag on the stopped version, not stopped
// again; after the job's resume, a stale "stopping" record of the old
// version stops nothing and is dropped.
func TestRecordPhasesAreReadFromNomad(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "phases-test")
	svc, _ := s.startInstance("q", nil, nil)
	_, b, suspended, _ := suspendSome(s, svc, 1)
	j := suspended[0]
	// lost rewrites the record of j, once it is in phase from and
	// settled, as a "stopping" record of the version it stopped.
	lost := func(from state.Phase) state.Suspension {
		t.Helper()
		var rec state.Suspension
		testcluster.Eventually(t, 30*time.Second, func() error {
			rec = s.waitRecord(j, from)
			if rec.Tagged != (from == state.PhaseSuspended) {
				return fmt.Errorf("record %+v not settled yet", rec)
			}
			next := rec
			next.Phase, next.StopVersion, next.StopJobModifyIndex, next.StoppedAt, next.Tagged = state.PhaseStopping, 0, 0, time.Time{}, false
			next.ResumedAt, next.ResumeJobModifyIndex = time.Time{}, 0
			return s.store.PutSuspension(context.Background(), &next)
		})
		return rec
	}
	rec := lost(state.PhaseSuspended)
	if again := s.waitRecord(j, state.PhaseSuspended); again.StopJobModifyIndex != rec.StopJobModifyIndex || !again.Tagged {
		t.Fatalf("record marked again %+v, want the stop Nomad shows (%d), tagged", again, rec.StopJobModifyIndex)
	}
	for _, x := range b {
		s.finish(x.ns, x.id)
	}
	s.wait(90*time.Second, "running again", isRunning, j)
	lost(state.PhaseResumed)
	testcluster.Eventually(t, 30*time.Second, func() error {
		if recs, err := s.records(); err != nil || len(recs) > 0 {
			return fmt.Errorf("records %v (%v), want the stale one dropped", keys(recs), err)
		}
		return nil
	})
	waitCycles(t, svc, 3)
	s.wait(10*time.Second, "still running", isRunning, j)
	want := []state.Event{state.EventSuspend, state.EventResume, state.EventSuspendAbandoned}
	if got := s.historyOf(j); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("history of %s/%s: %v, want %v", j.ns, j.id, got, want)
	}
}

// TestOwnerScalesASuspendedJob: Nomad keeps a suspended (stopped) job
// stopped when its owner scales it, at a new version. The suspension
// stands and takes the owner's version: the job comes back at the new
// count when GPUs free up (found by the chaos soak: the scale was read as
// the owner's stop and the job was never resumed).
func TestOwnerScalesASuspendedJob(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "rescale-test")
	svc, _ := s.startInstance("q", nil, nil)
	a, b, suspended, _ := suspendSome(s, svc, 2)
	scaled := suspended[0]
	two := 2
	if _, _, err := c.Nomad.Jobs().Scale(scaled.id, "main", &two, "owner: two workers", false, nil, &nomadapi.WriteOptions{Namespace: scaled.ns}); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, 60*time.Second, func() error {
		if got := s.historyOf(scaled); !slices.Contains(got, state.EventOwnerRescaled) {
			return fmt.Errorf("history of %s: %v, want owner-rescaled", scaled.id, got)
		}
		return nil
	})
	if rec := s.waitRecord(scaled, state.PhaseSuspended); rec.Groups["main"] != 2 {
		t.Errorf("record groups %v, want main at the owner's 2", rec.Groups)
	}
	// A second scale, to the same count, after the first was adopted
	// (the soak's seed 1 did this): still the owner's scale, not a stop.
	if _, _, err := c.Nomad.Jobs().Scale(scaled.id, "main", &two, "owner: two workers again", false, nil, &nomadapi.WriteOptions{Namespace: scaled.ns}); err != nil {
		t.Fatal(err)
	}
	waitCycles(t, svc, 4)
	if got := s.historyOf(scaled); slices.Contains(got, state.EventOwnerStopped) {
		t.Fatalf("history of %s: %v; a scale to the same count is no stop", scaled.id, got)
	}
	for _, j := range b {
		s.finish(j.ns, j.id)
	}
	for _, j := range a {
		if !slices.ContainsFunc(suspended, func(x gpuJob) bool { return x.id == j.id }) {
			s.finish(j.ns, j.id)
		}
	}
	s.wait(120*time.Second, "running both instances", runsAll(2), scaled)
}
