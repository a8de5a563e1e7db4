package service_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// metric sums the samples of the counter or gauge name whose labels
// include want.
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
