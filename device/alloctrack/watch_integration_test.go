package alloctrack

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// liveWindow bounds each wait on the real agents (a busy 2-core machine).
const liveWindow = 90 * time.Second

// requestCounter is a reverse proxy to the Nomad API that counts the
// requests it forwards, by path, apart for blocking queries (an index
// parameter) and plain reads.
type requestCounter struct {
	*httptest.Server
	mu       sync.Mutex
	plain    map[string]int
	blocking map[string]int
}

func newRequestCounter(t testing.TB, target string) *requestCounter {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rc := &requestCounter{plain: map[string]int{}, blocking: map[string]int{}}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) }}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.mu.Lock()
		if idx := r.URL.Query().Get("index"); idx != "" && idx != "0" {
			rc.blocking[r.URL.Path]++
		} else {
			rc.plain[r.URL.Path]++
		}
		rc.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// plainReads counts the plain (not blocking) requests whose path has the
// prefix.
func (rc *requestCounter) plainReads(prefix string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for p, c := range rc.plain {
		if strings.HasPrefix(p, prefix) {
			n += c
		}
	}
	return n
}

func (rc *requestCounter) String() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return fmt.Sprintf("plain %v, blocking %v", rc.plain, rc.blocking)
}

// allocIDs lists the allocations in the tracker's view.
func (t *Tracker) allocIDs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, a := range t.view.allocs {
		out = append(out, a.ID)
	}
	return out
}

// TestWatchOnRealNomad: with Watch running, Read answers from the blocking
// queries and sends nothing while the node does not change; a job placed
// on the node reaches the tracker through them without any plain read of
// the node; the blocked-evaluation listing carries only the evaluations
// that failed for devices.
func TestWatchOnRealNomad(t *testing.T) {
	c := testcluster.Start(t, localcluster.Options{})
	rc := newRequestCounter(t, c.NomadAddr)
	tr, err := New(Config{Address: rc.URL, Demand: true, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: testWriter{t}})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		tr.Watch(ctx, WatchOptions{MinInterval: 100 * time.Millisecond})
	}()
	defer func() { cancel(); <-watchDone }()
	if _, err := tr.Read(ctx, ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	nodeID, _ := tr.NodeID(ctx)
	testcluster.Eventually(t, liveWindow, func() error {
		snap, err := tr.Read(ctx, ReadOptions{})
		if err != nil || !snap.Watched {
			return fmt.Errorf("Read not answered from the watches yet (%v)", err)
		}
		return nil
	})

	// Nothing changes: reads are answered without a request.
	before := rc.plainReads("/v1/")
	for i := 0; i < 50; i++ {
		snap, err := tr.Read(ctx, ReadOptions{})
		if err != nil || !snap.Watched || snap.Hidden != "" {
			t.Fatalf("read %d: watched %v, hidden %q, %v", i, snap.Watched, snap.Hidden, err)
		}
	}
	if n := rc.plainReads("/v1/") - before; n != 0 {
		t.Errorf("50 reads of an unchanged node sent %d plain requests (%s)", n, rc)
	}

	// A placement reaches the view through the blocking query.
	nodeReads := rc.plainReads("/v1/node/" + nodeID)
	job := api.NewServiceJob("sleeper", "sleeper", "global", 50)
	job.Datacenters = []string{"dc1"}
	task := api.NewTask("main", "raw_exec").SetConfig("command", "/bin/sleep").SetConfig("args", []string{"3600"})
	task.Resources = &api.Resources{CPU: ptr(20), MemoryMB: ptr(16)}
	job.AddTaskGroup(api.NewTaskGroup("main", 1).AddTask(task))
	if _, _, err := c.Nomad.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, liveWindow, func() error {
		stubs, _, err := c.Nomad.Jobs().Allocations("sleeper", false, nil)
		if err != nil || len(stubs) == 0 {
			return fmt.Errorf("sleeper not placed yet (%v)", err)
		}
		if ids := tr.allocIDs(); !contains(ids, stubs[0].ID) {
			return fmt.Errorf("the tracker's view has %v, not %s", ids, stubs[0].ID)
		}
		return nil
	})
	if n := rc.plainReads("/v1/node/"+nodeID) - nodeReads; n != 0 {
		t.Errorf("the placement was seen after %d plain reads of the node; want none (%s)", n, rc)
	}

	// The job stops: seen through the blocking query too.
	if _, _, err := c.Nomad.Jobs().Deregister("sleeper", false, nil); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, liveWindow, func() error {
		t.Helper()
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, a := range tr.view.allocs {
			if a.JobID == "sleeper" && a.DesiredStatus == api.AllocDesiredStatusRun {
				return fmt.Errorf("the tracker's view still has sleeper's allocation %s to run", a.ID)
			}
		}
		return nil
	})
	if n := rc.plainReads("/v1/node/"+nodeID) - nodeReads; n != 0 {
		t.Errorf("the stop was seen after %d plain reads of the node; want none (%s)", n, rc)
	}

	// Blocked evaluations: one for devices (the node has none), one for
	// memory; only the first is listed.
	blockedJob(t, c, "wants-gpu", &api.Resources{CPU: ptr(20), MemoryMB: ptr(16),
		Devices: []*api.RequestedDevice{{Name: "nvidia/gpu", Count: ptr(uint64(1))}}})
	blockedJob(t, c, "wants-memory", &api.Resources{CPU: ptr(20), MemoryMB: ptr(1 << 30)})
	testcluster.Eventually(t, liveWindow, func() error {
		evals, _, err := c.Nomad.Evaluations().List(&api.QueryOptions{Filter: `Status == "blocked"`})
		if err != nil || len(evals) < 2 {
			return fmt.Errorf("%d blocked evaluations, want 2 (%v)", len(evals), err)
		}
		snap, err := tr.Read(ctx, ReadOptions{})
		if err != nil || snap.DemandErr != nil {
			return fmt.Errorf("read: %v, demand: %v", err, snap.DemandErr)
		}
		listed, err := tr.blocked(ctx)
		if err != nil {
			return err
		}
		var jobs []string
		for _, e := range listed {
			jobs = append(jobs, e.JobID)
		}
		if fmt.Sprint(jobs) != "[wants-gpu]" {
			return fmt.Errorf("blocked evaluations listed for the node: %v, want [wants-gpu]", jobs)
		}
		if len(snap.Demand) != 1 || !strings.HasPrefix(snap.Demand[0].Key, "default/wants-gpu/") {
			return fmt.Errorf("demand %v, want wants-gpu's", snap.Demand)
		}
		return nil
	})
	t.Logf("requests: %s", rc)
}

// blockedJob registers a batch job that cannot be placed.
func blockedJob(t *testing.T, c *localcluster.Cluster, name string, res *api.Resources) {
	t.Helper()
	job := api.NewBatchJob(name, name, "global", 50)
	job.Datacenters = []string{"dc1"}
	task := api.NewTask("main", "raw_exec").SetConfig("command", "/bin/true")
	task.Resources = res
	job.AddTaskGroup(api.NewTaskGroup("main", 1).AddTask(task))
	if _, _, err := c.Nomad.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
