package service_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// gpuJob describes a controllable batch job: its task loops until the file
// <control>/<namespace>-<id> or <control>/all-<namespace> exists, so the
// test decides when it completes.
type gpuJob struct {
	ns, id   string
	whole    int // nvidia/gpu instances
	shares   int // nvidia/gpu-share instances
	priority int
}

// scenario is one test's world: a KV root, quotas, control files and the
// jobs it submitted (purged when the test ends).
type scenario struct {
	t       testing.TB
	c       *localcluster.Cluster
	layout  kvlayout.Layout
	store   *state.Store
	control string
	mu      sync.Mutex
	jobs    []gpuJob
}

func newScenario(t testing.TB, c *localcluster.Cluster, root string) *scenario {
	t.Helper()
	control, err := os.MkdirTemp("", "gpushare-control-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(control, 0o777)
	s := &scenario{t: t, c: c, layout: kvlayout.New(root), control: control}
	s.store = state.New(c.Consul, s.layout)
	t.Cleanup(func() {
		s.purgeAll()
		os.RemoveAll(control)
		c.Consul.KV().DeleteTree(s.layout.Root+"/", nil)
	})
	return s
}

// purgeAll purges every job of the scenario and waits until none holds a
// GPU, so the next test starts on an idle node.
func (s *scenario) purgeAll() {
	s.mu.Lock()
	jobs := append([]gpuJob(nil), s.jobs...)
	s.mu.Unlock()
	for _, j := range jobs {
		s.c.Nomad.Jobs().Deregister(j.id, true, &nomadapi.WriteOptions{Namespace: j.ns})
	}
	testcluster.Eventually(s.t, 60*time.Second, func() error {
		allocs, _, err := s.c.Nomad.Allocations().List(&nomadapi.QueryOptions{Namespace: "*"})
		if err != nil {
			return err
		}
		for _, a := range allocs {
			if a.ClientStatus == "running" || a.ClientStatus == "pending" {
				for _, j := range jobs {
					if a.Namespace == j.ns && a.JobID == j.id {
						return fmt.Errorf("allocation %s of %s/%s still %s", a.ID, a.Namespace, a.JobID, a.ClientStatus)
					}
				}
			}
		}
		return nil
	})
}

func (s *scenario) quota(project, doc string) {
	s.t.Helper()
	if _, err := s.c.Consul.KV().Put(&consulapi.KVPair{Key: s.layout.Quota(project), Value: []byte(doc)}, nil); err != nil {
		s.t.Fatalf("writing quota %s: %v", project, err)
	}
}

func (s *scenario) namespace(ns string) {
	s.t.Helper()
	if _, err := s.c.Nomad.Namespaces().Register(&nomadapi.Namespace{Name: ns}, nil); err != nil {
		s.t.Fatalf("creating namespace %s: %v", ns, err)
	}
}

func (s *scenario) submit(j gpuJob) {
	s.t.Helper()
	s.namespace(j.ns)
	prio := j.priority
	if prio == 0 {
		prio = 50
	}
	job := nomadapi.NewBatchJob(j.id, j.id, "global", prio)
	job.Namespace = &j.ns
	job.Datacenters = []string{"dc1"}
	script := fmt.Sprintf("while [ ! -e %[1]s/%[2]s-%[3]s ] && [ ! -e %[1]s/all-%[2]s ]; do sleep 0.2; done", s.control, j.ns, j.id)
	task := nomadapi.NewTask("work", "raw_exec").SetConfig("command", "/bin/sh").SetConfig("args", []string{"-c", script})
	task.Resources = &nomadapi.Resources{CPU: ptr(20), MemoryMB: ptr(16)}
	task.KillTimeout = ptr(time.Second)
	if j.whole > 0 {
		task.Resources.Devices = append(task.Resources.Devices, &nomadapi.RequestedDevice{Name: "nvidia/gpu", Count: ptr(uint64(j.whole))})
	}
	if j.shares > 0 {
		task.Resources.Devices = append(task.Resources.Devices, &nomadapi.RequestedDevice{Name: "nvidia/gpu-share", Count: ptr(uint64(j.shares))})
	}
	tg := nomadapi.NewTaskGroup("main", 1).AddTask(task)
	tg.RestartPolicy = &nomadapi.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	tg.ReschedulePolicy = &nomadapi.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}
	job.AddTaskGroup(tg)
	s.mu.Lock()
	s.jobs = append(s.jobs, j)
	s.mu.Unlock()
	if _, _, err := s.c.Nomad.Jobs().Register(job, &nomadapi.WriteOptions{Namespace: j.ns}); err != nil {
		s.t.Fatalf("registering %s/%s: %v", j.ns, j.id, err)
	}
}

// finish lets one job (id) or all jobs of a namespace (id == "") exit.
func (s *scenario) finish(ns, id string) {
	s.t.Helper()
	name := "all-" + ns
	if id != "" {
		name = ns + "-" + id
	}
	if err := os.WriteFile(filepath.Join(s.control, name), nil, 0o644); err != nil {
		s.t.Fatal(err)
	}
}

// jobState is what the test sees of one job.
type jobState struct {
	stopped  bool
	running  int
	complete bool // dead, not stopped, an allocation completed
	status   string
}

func (s *scenario) jobState(ns, id string) (jobState, error) {
	job, _, err := s.c.Nomad.Jobs().Info(id, &nomadapi.QueryOptions{Namespace: ns})
	if err != nil {
		return jobState{}, fmt.Errorf("reading %s/%s: %w", ns, id, err)
	}
	allocs, _, err := s.c.Nomad.Jobs().Allocations(id, true, &nomadapi.QueryOptions{Namespace: ns})
	if err != nil {
		return jobState{}, fmt.Errorf("listing allocations of %s/%s: %w", ns, id, err)
	}
	st := jobState{stopped: job.Stop != nil && *job.Stop, status: *job.Status}
	completed := false
	for _, a := range allocs {
		if a.ClientStatus == "running" && a.DesiredStatus == "run" {
			st.running++
		}
		completed = completed || a.ClientStatus == "complete" && a.DesiredStatus == "run"
	}
	st.complete = !st.stopped && st.status == "dead" && completed
	return st, nil
}

// wait polls until every listed job is in the wanted condition.
func (s *scenario) wait(timeout time.Duration, what string, cond func(jobState) bool, jobs ...gpuJob) {
	s.t.Helper()
	testcluster.Eventually(s.t, timeout, func() error {
		for _, j := range jobs {
			st, err := s.jobState(j.ns, j.id)
			if err != nil {
				return err
			}
			if !cond(st) {
				return fmt.Errorf("%s/%s is not %s: %+v", j.ns, j.id, what, st)
			}
		}
		return nil
	})
}

func isRunning(st jobState) bool  { return !st.stopped && st.running == 1 }
func isComplete(st jobState) bool { return st.complete }

// records returns the suspension records by "namespace/job".
func (s *scenario) records() (map[string]state.Suspension, error) {
	recs, _, err := s.store.Suspensions(context.Background())
	if err != nil {
		return nil, err
	}
	out := map[string]state.Suspension{}
	for _, r := range recs {
		out[r.Namespace+"/"+r.Job] = r
	}
	return out, nil
}

// watchNothingLost polls until stop is closed: at every poll every job
// is registered and not stopped (pending, running or complete) or has a
// suspension record in KV. The records are read before and after the
// jobs so that a suspension or resume between the reads is no false
// alarm. It returns the violations and the number of polls.
func (s *scenario) watchNothingLost(jobs []gpuJob) (stop func() ([]string, int)) {
	done := make(chan struct{})
	var violations []string
	polls := 0
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			before, err1 := s.records()
			states := map[string]jobState{}
			var err2 error
			for _, j := range jobs {
				st, err := s.jobState(j.ns, j.id)
				if err != nil {
					err2 = err
					break
				}
				states[j.ns+"/"+j.id] = st
			}
			after, err3 := s.records()
			if err := errors.Join(err1, err2, err3); err != nil {
				continue // the agents are busy; a missed poll is no violation
			}
			polls++
			for key, st := range states {
				_, r1 := before[key]
				_, r2 := after[key]
				if st.stopped && !r1 && !r2 {
					violations = append(violations, fmt.Sprintf("%s %s is stopped with no suspension record (%+v)", time.Now().Format("15:04:05.000"), key, st))
				}
			}
		}
	}()
	return func() ([]string, int) {
		close(done)
		<-finished
		return violations, polls
	}
}

// historyEvents returns "event ns/job" lines of the KV history in order.
func (s *scenario) historyEvents() []string {
	s.t.Helper()
	hist, err := s.store.History(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, e := range hist {
		out = append(out, string(e.Event)+" "+e.Namespace+"/"+e.Job)
	}
	return out
}

func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// startQuotaService runs one in-process instance with production
// defaults except a short leader session, and waits until it leads.
func (s *scenario) startQuotaService(name string, tweak func(*service.Config)) (*service.Service, context.CancelFunc) {
	s.t.Helper()
	cfg := service.Config{Nomad: s.c.Nomad, Consul: s.c.Consul, Layout: s.layout, Log: logger(s.t).Named(name), Instance: name,
		SessionTTL: 10 * time.Second, LockDelay: time.Millisecond}
	if tweak != nil {
		tweak(&cfg)
	}
	svc := service.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	s.t.Cleanup(stop)
	return svc, stop
}

func waitLeader(t testing.TB, svc *service.Service) {
	t.Helper()
	testcluster.Eventually(t, 30*time.Second, func() error {
		if !svc.Health().Leader {
			return errors.New("not leading yet")
		}
		if svc.Status().LastCycle.IsZero() {
			return errors.New("no cycle yet")
		}
		return nil
	})
}

func jobsOf(ns string, n int, whole int) []gpuJob {
	var out []gpuJob
	for i := 1; i <= n; i++ {
		out = append(out, gpuJob{ns: ns, id: fmt.Sprintf("%s-job%d", strings.TrimPrefix(ns, "team-"), i), whole: whole})
	}
	return out
}

// TestReclaimGuaranteedGPUsAndResume is issue 5's first behaviour: two
// projects guaranteed 2 GPUs each on a 4-GPU node. A runs 4 whole-GPU
// jobs; B submits 2; within 5 s two of A's jobs are suspended and B's
// run; when B's finish, A's two resume by themselves and complete. At
// every poll every job is pending, running, complete or recorded in KV,
// and the KV history tells the story.
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

	latency, suspended := s.reclaim(a, b, 2)
	t.Logf("reclaim: team-b's 2 jobs run %.2fs after submission", latency.Seconds())
	if latency > 5*time.Second {
		t.Errorf("reclaim took %s from team-b's submission, want at most 5s", latency.Round(10*time.Millisecond))
	}
	recs, err := s.records()
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range suspended {
		r, ok := recs[j.ns+"/"+j.id]
		if !ok || !r.Stopped || r.ForProject != "team-b" || r.Reason == "" {
			t.Fatalf("record of %s/%s = %+v, want stopped, for team-b, with a reason", j.ns, j.id, r)
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

// reclaim submits b while a runs, waits until all of b runs and exactly
// want of a's jobs are suspended, and returns the time from b's
// submission and the suspended jobs.
func (s *scenario) reclaim(a, b []gpuJob, want int) (time.Duration, []gpuJob) {
	s.t.Helper()
	start := time.Now()
	for _, j := range b {
		s.submit(j)
	}
	var suspended []gpuJob
	testcluster.Eventually(s.t, 60*time.Second, func() error {
		suspended = nil
		for _, j := range b {
			st, err := s.jobState(j.ns, j.id)
			if err != nil {
				return err
			}
			if !isRunning(st) {
				return fmt.Errorf("%s/%s not running yet: %+v", j.ns, j.id, st)
			}
		}
		for _, j := range a {
			st, err := s.jobState(j.ns, j.id)
			if err != nil {
				return err
			}
			if st.stopped && st.running == 0 {
				suspended = append(suspended, j)
			}
		}
		if len(suspended) != want {
			return fmt.Errorf("%d of %s's jobs suspended, want %d", len(suspended), a[0].ns, want)
		}
		return nil
	})
	return time.Since(start), suspended
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestReclaimVictimOrder is issue 5's third behaviour: with two
// over-quota projects the lower-priority one is reclaimed first; at equal
// priority, the one most over its fair share.
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

// TestReclaimWholeGPUFromShareTenants is issue 5's second behaviour on
// the demo's plugin configuration (one idle GPU kept in the share family):
// a project under its guarantee that needs a whole GPU gets one held by
// two 0.5 share tenants (count = 50 each) of an over-quota project. It
// runs its own cluster.
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
