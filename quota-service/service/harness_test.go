package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
)

// gpuJob describes a controllable batch job: its task loops until the file
// <control>/<namespace>-<id> or <control>/all-<namespace> exists, so the
// test decides when it completes.
type gpuJob struct {
	ns, id   string
	whole    int // nvidia/gpu instances
	shares   int // nvidia/gpu-share instances
	priority int
	// groups is the number of task groups, each asking whole and shares
	// (0: one); meta is the job's meta.
	groups int
	meta   map[string]string
	// count is each group's instance count (0: one); groupMeta each
	// group's meta.
	count     int
	groupMeta map[string]string
	// slowStop makes the task ignore SIGINT, so that a stop takes its
	// kill timeout (8 s) to end it.
	slowStop bool
	// node constrains the job to the node of that ID, prefer gives it an
	// affinity to it ("": none).
	node, prefer string
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

// recordKeys are the keys the service signs records with on c: the
// default Nomad Variable, which the first instance creates.
func recordKeys(c *localcluster.Cluster) recordkey.Source {
	return &recordkey.Variable{Client: c.Nomad, Namespace: "default", Path: service.DefaultRecordKeyPath}
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
	s.store.Keys = recordKeys(c)
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
	job.Meta = j.meta
	for g := range max(j.groups, 1) {
		name := "main"
		if g > 0 {
			name = fmt.Sprintf("main-%d", g+1)
		}
		job.AddTaskGroup(s.taskGroup(j, name))
	}
	s.mu.Lock()
	s.jobs = append(s.jobs, j)
	s.mu.Unlock()
	if _, _, err := s.c.Nomad.Jobs().Register(job, &nomadapi.WriteOptions{Namespace: j.ns}); err != nil {
		s.t.Fatalf("registering %s/%s: %v", j.ns, j.id, err)
	}
}

// taskGroup is one group of j: a task that waits for its control file.
func (s *scenario) taskGroup(j gpuJob, name string) *nomadapi.TaskGroup {
	script := fmt.Sprintf("while [ ! -e %[1]s/%[2]s-%[3]s ] && [ ! -e %[1]s/all-%[2]s ]; do sleep 0.2; done", s.control, j.ns, j.id)
	task := nomadapi.NewTask("work", "raw_exec").SetConfig("command", "/bin/sh").SetConfig("args", []string{"-c", script})
	task.Resources = &nomadapi.Resources{CPU: ptr(20), MemoryMB: ptr(16)}
	task.KillTimeout = ptr(time.Second)
	if j.slowStop {
		task.Config["args"] = []string{"-c", "trap '' INT; " + script}
		task.KillTimeout = ptr(8 * time.Second)
	}
	if j.whole > 0 {
		task.Resources.Devices = append(task.Resources.Devices, &nomadapi.RequestedDevice{Name: "nvidia/gpu", Count: ptr(uint64(j.whole))})
	}
	if j.shares > 0 {
		task.Resources.Devices = append(task.Resources.Devices, &nomadapi.RequestedDevice{Name: "nvidia/gpu-share", Count: ptr(uint64(j.shares))})
	}
	tg := nomadapi.NewTaskGroup(name, max(j.count, 1)).AddTask(task)
	tg.Meta = j.groupMeta
	if j.node != "" {
		tg.Constraints = append(tg.Constraints, nomadapi.NewConstraint("${node.unique.id}", "=", j.node))
	}
	if j.prefer != "" {
		tg.Affinities = append(tg.Affinities, nomadapi.NewAffinity("${node.unique.id}", "=", j.prefer, 100))
	}
	tg.RestartPolicy = &nomadapi.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	tg.ReschedulePolicy = &nomadapi.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}
	return tg
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
	// nodes are the nodes of its running allocations, in listing order.
	nodes []string
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
			st.nodes = append(st.nodes, a.NodeID)
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

func isRunning(st jobState) bool { return !st.stopped && st.running == 1 }

func isComplete(st jobState) bool { return st.complete }

// records returns the suspension records by "namespace/job".
func (s *scenario) records() (map[string]state.Suspension, error) {
	recs, err := s.store.Suspensions(context.Background())
	if err != nil {
		return nil, err
	}
	out := map[string]state.Suspension{}
	for _, r := range recs.Verified {
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
// defaults except a short leader session (callers wait with waitLeader).
func (s *scenario) startQuotaService(name string, tweak func(*service.Config)) (*service.Service, func()) {
	s.t.Helper()
	return s.startInstance(name, func(cfg *service.Config) {
		cfg.PlanInterval = service.DefaultPlanInterval
		if tweak != nil {
			tweak(cfg)
		}
	}, nil)
}

// startInstance runs one in-process instance; prepare may set test hooks
// before it starts. The returned stop cancels it and waits until Run
// returned (the lock is released).
func (s *scenario) startInstance(name string, tweak func(*service.Config), prepare func(*service.Service)) (*service.Service, func()) {
	s.t.Helper()
	cfg := service.Config{Nomad: s.c.Nomad, Consul: s.c.Consul, Layout: s.layout, Log: logger(s.t).Named(name), Instance: name,
		SessionTTL: 10 * time.Second, LockDelay: time.Millisecond, PlanInterval: time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	svc := service.New(cfg)
	if prepare != nil {
		prepare(svc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	s.t.Cleanup(stop)
	return svc, stop
}

// completedCycles is the number of cycles svc completed without error:
// gpushare_cycle_seconds counts every cycle, gpushare_cycle_errors_total
// those that took no action.
func completedCycles(t testing.TB, svc *service.Service) int {
	t.Helper()
	reg := svc.Registry()
	return int(metric(t, reg, "gpushare_cycle_seconds", nil) - metric(t, reg, "gpushare_cycle_errors_total", nil))
}

// waitCycles waits until svc has completed n more cycles, and fails when
// it makes no progress: the deadline allows 10 s a cycle (the tests' plan
// interval is 1 s).
func waitCycles(t testing.TB, svc *service.Service, n int) {
	t.Helper()
	target := completedCycles(t, svc) + n
	testcluster.Eventually(t, 30*time.Second+time.Duration(n)*10*time.Second, func() error {
		if got := completedCycles(t, svc); got < target {
			return fmt.Errorf("%s completed %d cycles, waiting for %d", svc.Status().Instance, got, target)
		}
		return nil
	})
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

// leaders returns the instances that say they lead.
func leaders(svcs ...*service.Service) []string {
	var out []string
	for _, s := range svcs {
		if st := s.Status(); st.Leader {
			out = append(out, st.Instance)
		}
	}
	return out
}

func jobsOf(ns string, n int, whole int) []gpuJob {
	var out []gpuJob
	for i := 1; i <= n; i++ {
		out = append(out, gpuJob{ns: ns, id: fmt.Sprintf("%s-job%d", strings.TrimPrefix(ns, "team-"), i), whole: whole})
	}
	return out
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

// suspendedOf returns the jobs of js stopped with no allocation running.
func (s *scenario) suspendedOf(js []gpuJob) ([]gpuJob, error) {
	var out []gpuJob
	for _, j := range js {
		st, err := s.jobState(j.ns, j.id)
		if err != nil {
			return nil, err
		}
		if st.stopped && st.running == 0 {
			out = append(out, j)
		}
	}
	return out, nil
}

// runningSet lists the jobs that run, sorted.
func (s *scenario) runningSet(jobs []gpuJob) ([]string, error) {
	var out []string
	for _, j := range jobs {
		st, err := s.jobState(j.ns, j.id)
		if err != nil {
			return nil, err
		}
		if isRunning(st) {
			out = append(out, j.ns+"/"+j.id)
		}
	}
	sort.Strings(out)
	return out, nil
}

// actions counts the history entries that are actions on jobs (suspend,
// suspend-finished, resume).
func actions(hist []state.Entry) int {
	n := 0
	for _, e := range hist {
		switch e.Event {
		case state.EventSuspend, state.EventSuspendFinished, state.EventResume:
			n++
		}
	}
	return n
}

// checkOneSuspendPerJob fails when a job has more than one "suspend"
// entry in the history, and returns the number of suspended jobs.
func (s *scenario) checkOneSuspendPerJob() int {
	s.t.Helper()
	hist, err := s.store.History(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	per := map[string]int{}
	for _, e := range hist {
		if e.Event == state.EventSuspend {
			per[e.Namespace+"/"+e.Job]++
		}
	}
	for j, n := range per {
		if n != 1 {
			s.t.Errorf("%s suspended %d times, want once: %v", j, n, s.historyEvents())
		}
	}
	return len(per)
}

// entriesBetween returns history entries with from <= Time < to.
func (s *scenario) entriesBetween(from, to time.Time) []string {
	s.t.Helper()
	var hist []state.Entry
	testcluster.Eventually(s.t, 30*time.Second, func() error {
		var err error
		hist, err = s.store.History(context.Background())
		return err
	})
	var out []string
	for _, e := range hist {
		if !e.Time.Before(from) && e.Time.Before(to) {
			out = append(out, fmt.Sprintf("%s %s %s/%s by %s", e.Time.Format("15:04:05.000"), e.Event, e.Namespace, e.Job, e.By))
		}
	}
	return out
}

func hasAll(list []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, l := range list {
			if strings.HasPrefix(l, w) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// metric sums the samples of the counter or gauge name whose labels
// include want; for a histogram it sums the sample counts.
func metric(t testing.TB, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue samples
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// lockedBuffer collects log output for assertions.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// teeLogger logs to the test and to buf.
func teeLogger(t testing.TB, name string, buf *lockedBuffer) hclog.Logger {
	level := hclog.Info
	if l := os.Getenv("GPUSHARE_TEST_LOG"); l != "" {
		level = hclog.LevelFromString(l)
	}
	return hclog.New(&hclog.LoggerOptions{Name: t.Name() + "." + name, Level: level, Output: io.MultiWriter(testWriter{t}, buf)})
}

// nomadJob reads a job from Nomad; nil when Nomad does not know it.
func (s *scenario) nomadJob(ns, id string) (*nomadapi.Job, error) {
	job, _, err := s.c.Nomad.Jobs().Info(id, &nomadapi.QueryOptions{Namespace: ns})
	var e nomadapi.UnexpectedResponseError
	if errors.As(err, &e) && e.StatusCode() == 404 {
		return nil, nil
	}
	return job, err
}

// sameContents says how got differs from want in what its owner wrote:
// task groups (tasks, their config, resources and devices), meta,
// priority, type and datacenters.
func sameContents(want, got *nomadapi.Job) error {
	type contents struct {
		TaskGroups  []*nomadapi.TaskGroup
		Meta        map[string]string
		Priority    *int
		Type        *string
		Datacenters []string
	}
	w, _ := json.Marshal(contents{want.TaskGroups, want.Meta, want.Priority, want.Type, want.Datacenters})
	g, _ := json.Marshal(contents{got.TaskGroups, got.Meta, got.Priority, got.Type, got.Datacenters})
	if !bytes.Equal(w, g) {
		return fmt.Errorf("contents differ:\nwant %s\ngot  %s", w, g)
	}
	return nil
}

// serviceTags returns the version tags of the job that the quota service
// put there ("gpushare-suspended-..."), by version.
func (s *scenario) serviceTags(ns, id string) (map[uint64]nomadapi.JobVersionTag, error) {
	versions, _, _, err := s.c.Nomad.Jobs().Versions(id, false, &nomadapi.QueryOptions{Namespace: ns})
	if err != nil {
		return nil, err
	}
	out := map[uint64]nomadapi.JobVersionTag{}
	for _, v := range versions {
		if v.VersionTag != nil && strings.HasPrefix(v.VersionTag.Name, "gpushare-suspended-") {
			out[*v.Version] = *v.VersionTag
		}
	}
	return out, nil
}

// waitRecord waits until the record of job is in one of the phases.
func (s *scenario) waitRecord(j gpuJob, phases ...state.Phase) state.Suspension {
	s.t.Helper()
	var rec state.Suspension
	testcluster.Eventually(s.t, 60*time.Second, func() error {
		recs, err := s.records()
		if err != nil {
			return err
		}
		r, ok := recs[j.ns+"/"+j.id]
		if !ok {
			return fmt.Errorf("no record of %s/%s", j.ns, j.id)
		}
		for _, p := range phases {
			if r.Phase == p {
				rec = r
				return nil
			}
		}
		return fmt.Errorf("record of %s/%s in phase %s, want %v", j.ns, j.id, r.Phase, phases)
	})
	return rec
}

// historyOf returns the history events of one job, in order.
func (s *scenario) historyOf(j gpuJob) []state.Event {
	s.t.Helper()
	hist, err := s.store.History(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	var out []state.Event
	for _, e := range hist {
		if e.Namespace == j.ns && e.Job == j.id {
			out = append(out, e.Event)
		}
	}
	return out
}
