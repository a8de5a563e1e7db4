package service_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/actuator"
	"github.com/gpushare/nomad-gpushare/quota-service/httpapi"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	c, err := newGPUCluster(wholeOnlyPluginConfig, "nvidia/gpu")
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting test cluster:", err)
		os.Exit(1)
	}
	cluster = c
	code := m.Run()
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping test cluster:", err)
	}
	os.Exit(code)
}

func needCluster(t testing.TB) *localcluster.Cluster {
	t.Helper()
	if cluster == nil {
		t.Skip("integration test: needs real agents; run without -short")
	}
	return cluster
}

func logger(t testing.TB) hclog.Logger {
	level := hclog.Info
	if l := os.Getenv("GPUSHARE_TEST_LOG"); l != "" {
		level = hclog.LevelFromString(l)
	}
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: level, Output: testWriter{t}})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

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

func ptr[T any](v T) *T { return &v }

func suspension(t *testing.T, store *state.Store, ns, id string) *state.Suspension {
	t.Helper()
	recs, _, err := store.Suspensions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
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
// before the job is stopped (not purged), resuming registers it again, and
// the record goes away once the job runs.
func TestActuatorSuspendsAndResumesARealJob(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()
	layout := kvlayout.New("mechanics-test")
	store := state.New(c.Consul, layout)
	log := logger(t)
	runSleeper(t, c, "team-a", "trainer")
	b := nomadwatch.NewBuilder(c.Nomad, log)
	act := actuator.New(c.Nomad, store, log, "test", actuator.Options{SuspendHold: time.Millisecond})
	key := nomadwatch.Key("team-a", "trainer")

	view := func() *nomadwatch.View {
		t.Helper()
		recs, _, err := store.Suspensions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		v, err := b.Build(ctx, nil, recs)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	// Suspend for a (made-up) pending workload of team-b.
	v := view()
	v.Snapshot.Pending = append(v.Snapshot.Pending, model.Pending{Project: "team-b", Job: "team-b/big", Group: "g", Count: 1, Ask: model.Ask{WholeGPUs: 1}})
	res := plan.Result{Actions: []plan.Action{{Kind: plan.Suspend, Project: "team-a", Job: key, Workload: 0, Reason: "reclaim for team-b"}}}
	rep, err := act.Apply(ctx, v, res)
	if err != nil || len(rep.Errors) > 0 || len(rep.Done) != 1 {
		t.Fatalf("Apply suspend: %v, report %+v", err, rep)
	}
	rec := suspension(t, store, "team-a", "trainer")
	if rec == nil || !rec.Stopped || rec.ForWorkload != "team-b/big/g" || rec.Groups["main"] != 1 || rec.Reason == "" {
		t.Fatalf("suspension record %+v: want stopped, for team-b/big/g, group main=1, a reason", rec)
	}
	waitJob(t, c, "team-a", "trainer", true)
	if n := history(t, store, "team-a", "trainer", state.EventSuspend); n != 1 {
		t.Fatalf("%d suspend history entries, want 1", n)
	}

	// The view now shows the job as suspended; a plan that places it
	// resumes it.
	v = view()
	if _, ok := v.Suspended[key]; !ok {
		t.Fatalf("view does not list %s as suspended: %+v", key, v.Suspended)
	}
	v.Snapshot.Pending = append(v.Snapshot.Pending, model.Pending{Project: "team-a", Job: key, Group: "main", Count: 1, Ask: model.Ask{WholeGPUs: 1}, Suspended: true})
	res = plan.Result{Actions: []plan.Action{{Kind: plan.Place, Project: "team-a", Job: key, Group: "main", Workload: len(v.Snapshot.Pending) - 1, Reason: "capacity returned"}}}
	if rep, err := act.Apply(ctx, v, res); err != nil || len(rep.Errors) > 0 || len(rep.Done) != 1 || rep.Done[0].Event != state.EventResume {
		t.Fatalf("Apply resume: %v, report %+v", err, rep)
	}
	waitJob(t, c, "team-a", "trainer", false)
	testcluster.Eventually(t, 10*time.Second, func() error {
		if _, err := act.Apply(ctx, view(), plan.Result{}); err != nil {
			return err
		}
		if r := suspension(t, store, "team-a", "trainer"); r != nil {
			return fmt.Errorf("record still present: %+v", r)
		}
		return nil
	})
	if n := history(t, store, "team-a", "trainer", state.EventResume); n != 1 {
		t.Fatalf("%d resume history entries, want 1", n)
	}

	// A resumed job is not suspended again for work above its project's
	// guarantee within the resume hold.
	v = view()
	v.Snapshot.Pending = append(v.Snapshot.Pending, model.Pending{Project: "team-b", Job: "team-b/big", Group: "g", Count: 1, Ask: model.Ask{WholeGPUs: 1}})
	res = plan.Result{Shares: []plan.ProjectShare{{Name: "team-b", Guaranteed: 0, Planned: 100}},
		Actions: []plan.Action{{Kind: plan.Suspend, Project: "team-a", Job: key, Workload: 0, Reason: "over quota"}}}
	rep, err = act.Apply(ctx, v, res)
	if err != nil || len(rep.Done) != 0 || len(rep.Skipped) != 1 {
		t.Fatalf("Apply right after resume: %v, report %+v; want the suspension held back", err, rep)
	}
}

// TestActuatorRefusesStaleView checks that nothing is done on old data.
func TestActuatorRefusesStaleView(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()
	store := state.New(c.Consul, kvlayout.New("stale-test"))
	runSleeper(t, c, "team-s", "busy")
	v, err := nomadwatch.NewBuilder(c.Nomad, logger(t)).Build(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	v.ListedAt = time.Now().Add(-time.Minute)
	v.Snapshot.Pending = append(v.Snapshot.Pending, model.Pending{Project: "x", Job: "x/y", Group: "g", Count: 1})
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
	testcluster.Eventually(t, 10*time.Second, func() error {
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
	testcluster.Eventually(t, 10*time.Second, func() error {
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
	testcluster.Eventually(t, 15*time.Second, func() error {
		if !other.Health().Leader {
			return errors.New("standby has not taken over")
		}
		return nil
	})
	t.Logf("failover took %s", time.Since(start).Round(time.Millisecond))
	// A few cycles later the suspension still happened exactly once.
	testcluster.Eventually(t, 5*time.Second, func() error {
		if other.Status().LastCycle.Before(start.Add(time.Second)) {
			return errors.New("new leader has not cycled yet")
		}
		return nil
	})
	if n := history(t, store, "team-f", "victim", state.EventSuspendFinished); n != 1 {
		t.Fatalf("%d suspend-finished entries, want exactly 1", n)
	}
	if r := suspension(t, store, "team-f", "victim"); r == nil || !r.Stopped {
		t.Fatalf("record %+v: want it kept, marked stopped, for the later resume", r)
	}
}
