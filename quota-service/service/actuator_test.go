package service_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/actuator"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	nomadapi "github.com/hashicorp/nomad/api"
)

// runSleeper registers a raw_exec service job in namespace ns and waits
// until it runs.
func runSleeper(t *testing.T, c *localcluster.Cluster, ns, id string) {
	t.Helper()
	if _, err := c.Nomad.Namespaces().Register(&nomadapi.Namespace{Name: ns}, nil); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	job := nomadapi.NewServiceJob(id, id, "global", 50)
	job.Namespace = &ns
	job.Datacenters = []string{"dc1"}
	task := nomadapi.NewTask("sleep", "raw_exec").SetConfig("command", "/bin/sleep").SetConfig("args", []string{"600"})
	task.Resources = &nomadapi.Resources{CPU: ptr(20), MemoryMB: ptr(16)}
	job.AddTaskGroup(nomadapi.NewTaskGroup("main", 1).AddTask(task))
	if _, _, err := c.Nomad.Jobs().Register(job, &nomadapi.WriteOptions{Namespace: ns}); err != nil {
		t.Fatalf("registering %s/%s: %v", ns, id, err)
	}
	t.Cleanup(func() { c.Nomad.Jobs().Deregister(id, true, &nomadapi.WriteOptions{Namespace: ns}) })
	waitJob(t, c, ns, id, false)
}

// waitJob waits until the job runs (stopped=false) or is stopped with no
// allocation left running (stopped=true).
func waitJob(t *testing.T, c *localcluster.Cluster, ns, id string, stopped bool) {
	t.Helper()
	testcluster.Eventually(t, 30*time.Second, func() error {
		job, _, err := c.Nomad.Jobs().Info(id, &nomadapi.QueryOptions{Namespace: ns})
		if err != nil {
			return err
		}
		allocs, _, err := c.Nomad.Jobs().Allocations(id, false, &nomadapi.QueryOptions{Namespace: ns})
		if err != nil {
			return err
		}
		running := 0
		for _, a := range allocs {
			if a.ClientStatus == "running" && a.DesiredStatus == "run" {
				running++
			}
		}
		if stopped && (job.Stop == nil || !*job.Stop || running > 0) {
			return fmt.Errorf("%s/%s: stop=%v, %d running, want stopped", ns, id, job.Stop != nil && *job.Stop, running)
		}
		if !stopped && (job.Stop != nil && *job.Stop || running != 1) {
			return fmt.Errorf("%s/%s: stop=%v, %d running, want running", ns, id, job.Stop != nil && *job.Stop, running)
		}
		return nil
	})
}

func suspension(t *testing.T, store *state.Store, ns, id string) *state.Suspension {
	t.Helper()
	recs, err := store.Suspensions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs.Verified {
		if r.Namespace == ns && r.Job == id {
			return &r
		}
	}
	return nil
}

func history(t *testing.T, store *state.Store, ns, id string, event state.Event) int {
	t.Helper()
	hist, err := store.History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range hist {
		if e.Namespace == ns && e.Job == id && e.Event == event {
			n++
		}
	}
	return n
}

// TestActuatorSuspendsAndResumesARealJob drives the actuator with
// hand-made plans against a real Nomad: a suspension writes its KV record
// (with the job's spec) before the job is stopped (not purged) and tags the
// stopped version; resuming registers the suspended version again and
// removes the tag; the record stays through the resume hold, during which
// the job is not suspended again for work above its project's guarantee,
// and goes once the hold ends.
func TestActuatorSuspendsAndResumesARealJob(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()
	s := newScenario(t, c, "mechanics-test")
	log := logger(t)
	j := gpuJob{ns: "team-a", id: "trainer", whole: 1}
	s.submit(j)
	s.wait(90*time.Second, "running", isRunning, j)
	b := nomadwatch.NewBuilder(c.Nomad, log, nomadwatch.Options{})
	act := actuator.New(c.Nomad, s.store, log, "test", actuator.Options{SuspendHold: time.Millisecond})
	key := nomadwatch.Key(j.ns, j.id)
	original, err := s.nomadJob(j.ns, j.id)
	if err != nil {
		t.Fatal(err)
	}

	view := func() *nomadwatch.View {
		t.Helper()
		recs, err := s.store.Suspensions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		v, err := b.Build(ctx, quota.Set{}, recs)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	// Suspend for a (made-up) pending workload of team-b.
	v := view()
	v.Snapshot.Pending = append(v.Snapshot.Pending, cluster.Pending{Project: "team-b", Job: "team-b/big", Group: "g", Count: 1, Ask: cluster.Ask{WholeGPUs: 1}})
	res := plan.Result{Actions: []plan.Action{{Kind: plan.Suspend, Project: "team-a", Job: key, Workload: len(v.Snapshot.Pending) - 1, Reason: "reclaim for team-b"}}}
	rep, err := act.Apply(ctx, v, res)
	if err != nil || len(rep.Errors) > 0 || len(rep.Done) != 1 {
		t.Fatalf("Apply suspend: %v, report %+v", err, rep)
	}
	rec := suspension(t, s.store, j.ns, j.id)
	if rec == nil || rec.Phase != state.PhaseSuspended || !rec.Tagged || rec.ForWorkload != "team-b/big/g" || rec.Groups["main"] != 1 || rec.Reason == "" {
		t.Fatalf("suspension record %+v: want suspended, tagged, for team-b/big/g, group main=1, a reason", rec)
	}
	keys, err := s.store.Keys.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if spec, err := rec.DecodeSpec(keys); err != nil || sameContents(original, spec) != nil {
		t.Fatalf("record's spec: %v %v", err, sameContents(original, spec))
	}
	s.wait(30*time.Second, "stopped", func(st jobState) bool { return st.stopped && st.running == 0 }, j)
	tags, err := s.serviceTags(j.ns, j.id)
	if err != nil || len(tags) != 1 || tags[rec.StopVersion].Name != rec.Tag || !strings.Contains(tags[rec.StopVersion].Description, "team-b") {
		t.Fatalf("tags %+v (%v): want %s on the stop's version %d, naming team-b", tags, err, rec.Tag, rec.StopVersion)
	}
	if n := history(t, s.store, j.ns, j.id, state.EventSuspend); n != 1 {
		t.Fatalf("%d suspend history entries, want 1", n)
	}

	// The view now shows the job as suspended; a plan that places it
	// resumes it.
	v = view()
	if r := v.Records[key]; r == nil || r.Verdict != nomadwatch.Suspended {
		t.Fatalf("view's record of %s: %+v, want suspended", key, r)
	}
	w := len(v.Snapshot.Pending) - 1
	if p := v.Snapshot.Pending[w]; p.Job != key || !p.Suspended {
		t.Fatalf("last pending %+v, want %s suspended", p, key)
	}
	res = plan.Result{Actions: []plan.Action{{Kind: plan.Place, Project: "team-a", Job: key, Group: "main", Workload: w, Reason: "capacity returned"}}}
	if rep, err := act.Apply(ctx, v, res); err != nil || len(rep.Errors) > 0 || len(rep.Done) != 1 || rep.Done[0].Event != state.EventResume {
		t.Fatalf("Apply resume: %v, report %+v", err, rep)
	}
	s.wait(60*time.Second, "running again", isRunning, j)
	resumed, err := s.nomadJob(j.ns, j.id)
	if err != nil || sameContents(original, resumed) != nil {
		t.Fatalf("resumed job: %v %v", err, sameContents(original, resumed))
	}
	if tags, err := s.serviceTags(j.ns, j.id); err != nil || len(tags) != 0 {
		t.Fatalf("tags after the resume %+v (%v), want none", tags, err)
	}
	if r := suspension(t, s.store, j.ns, j.id); r == nil || r.Phase != state.PhaseResumed {
		t.Fatalf("record after the resume %+v, want it kept, resumed, for the resume hold", r)
	}

	// A resumed job is not suspended again for work above its project's
	// guarantee within the resume hold.
	v = view()
	v.Snapshot.Pending = append(v.Snapshot.Pending, cluster.Pending{Project: "team-b", Job: "team-b/big", Group: "g", Count: 1, Ask: cluster.Ask{WholeGPUs: 1}})
	res = plan.Result{Shares: []plan.ProjectShare{{Name: "team-b", Guaranteed: 0, Planned: 100}},
		Actions: []plan.Action{{Kind: plan.Suspend, Project: "team-a", Job: key, Workload: len(v.Snapshot.Pending) - 1, Reason: "over quota"}}}
	rep, err = act.Apply(ctx, v, res)
	if err != nil || len(rep.Done) != 0 || len(rep.Skipped) != 1 {
		t.Fatalf("Apply right after resume: %v, report %+v; want the suspension held back", err, rep)
	}
	// Once the hold is over, the record goes.
	short := actuator.New(c.Nomad, s.store, log, "test", actuator.Options{ResumeHold: time.Millisecond})
	if rep, err := short.Apply(ctx, view(), plan.Result{}); err != nil || len(rep.Done) != 1 || rep.Done[0].Event != state.EventRunningAgain {
		t.Fatalf("Apply after the hold: %v, report %+v; want the record closed", err, rep)
	}
	if r := suspension(t, s.store, j.ns, j.id); r != nil {
		t.Fatalf("record still present: %+v", r)
	}
	if n := history(t, s.store, j.ns, j.id, state.EventResume); n != 1 {
		t.Fatalf("%d resume history entries, want 1", n)
	}
}

// TestActuatorRefusesStaleView checks that nothing is done on old data.
func TestActuatorRefusesStaleView(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()
	store := state.New(c.Consul, kvlayout.New("stale-test"))
	store.Keys = recordKeys(c)
	runSleeper(t, c, "team-s", "busy")
	v, err := nomadwatch.NewBuilder(c.Nomad, logger(t), nomadwatch.Options{}).Build(ctx, quota.Set{}, state.Records{})
	if err != nil {
		t.Fatal(err)
	}
	v.ListedAt = time.Now().Add(-time.Minute)
	v.Snapshot.Pending = append(v.Snapshot.Pending, cluster.Pending{Project: "x", Job: "x/y", Group: "g", Count: 1})
	act := actuator.New(c.Nomad, store, logger(t), "test", actuator.Options{})
	_, err = act.Apply(ctx, v, plan.Result{Actions: []plan.Action{{Kind: plan.Suspend, Job: "team-s/busy", Workload: 0}}})
	if !errors.Is(err, actuator.ErrStale) {
		t.Fatalf("Apply on a minute-old view: %v, want ErrStale", err)
	}
	if r := suspension(t, store, "team-s", "busy"); r != nil {
		t.Fatalf("a record was written from a stale view: %+v", r)
	}
	waitJob(t, c, "team-s", "busy", false)
}
