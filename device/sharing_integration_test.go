package device_test

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/vocab"
	nomadapi "github.com/hashicorp/nomad/api"
)

// Timing terms of the test node (pluginConfig) and of the Nomad client.
const (
	fingerprintPeriod = 1 * time.Second
	settlePeriod      = 2 * time.Second
	pollPeriod        = 500 * time.Millisecond
	// clientUpdate is the longest the Nomad client takes to push a device
	// change to the servers: it batches node updates for 5 s plus up to
	// 5 s of stagger (client/client.go, watchNodeUpdates).
	clientUpdate = 10 * time.Second
	slack        = 5 * time.Second
	// switchBound is about how long a GPU takes to move between families
	// on an idle machine: a poll sees it idle and withdraws it, the client
	// pushes the withdrawal, a poll sees the servers' view, it settles, a
	// poll publishes it, the client pushes the publication, and the
	// scheduler places a waiting job. Tests log it next to what they
	// measured; BenchmarkSwitchOnRealNomad measures it.
	switchBound = fingerprintPeriod + settlePeriod + 2*clientUpdate + 3*pollPeriod + slack
	// liveWindow bounds every wait of the integration tests on real
	// agents: a liveness bound (the GPU does switch, the job is placed),
	// about three switches, so that a busy 2-core machine passes.
	liveWindow = 90 * time.Second
)

// nomadGate is a reverse proxy to the Nomad API that answers 503 until it
// is opened. The plugin of startBareCluster reads Nomad through it, so a
// test decides when the plugin first sees Nomad, and thus when it first
// publishes GPUs (never before). With ACLs on, it gives the plugin's
// requests the token the test chooses (useToken), as a plugin configured
// with that nomad_token would send, and counts the plugin's reads of the
// node's allocations per token (allocReads).
type nomadGate struct {
	*httptest.Server
	target atomic.Pointer[url.URL]
	token  atomic.Pointer[string]
	mu     sync.Mutex
	reads  map[string]int // allocation list reads by token
	// byPath counts every request by method and path (IDs as :id), with
	// " (blocking)" for blocking queries.
	byPath map[string]int
	// blockedLists counts the listings of blocked evaluations that failed
	// for devices (the plugin's demand reads, not the settle proof's).
	blockedLists int
}

func newNomadGate(t testing.TB) *nomadGate {
	g := &nomadGate{reads: map[string]int{}, byPath: map[string]int{}}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(g.target.Load()) }}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.target.Load() == nil {
			http.Error(w, "test gate: Nomad not reachable yet", http.StatusServiceUnavailable)
			return
		}
		tok := ""
		if p := g.token.Load(); p != nil {
			tok = *p
			r.Header.Set("X-Nomad-Token", tok)
		}
		g.mu.Lock()
		if strings.HasSuffix(r.URL.Path, "/allocations") {
			g.reads[tok]++
		}
		g.byPath[requestKind(r)]++
		if r.URL.Path == "/v1/evaluations" && strings.Contains(r.URL.Query().Get("filter"), "FailedTGAllocs") {
			g.blockedLists++
		}
		g.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(g.Close)
	return g
}

// requestKind names a request for nomadGate.byPath.
func requestKind(r *http.Request) string {
	parts := strings.Split(r.URL.Path, "/")
	for i, p := range parts {
		if len(p) == 36 && strings.Count(p, "-") == 4 {
			parts[i] = ":id"
		}
	}
	k := r.Method + " " + strings.Join(parts, "/")
	if idx := r.URL.Query().Get("index"); idx != "" && idx != "0" {
		k += " (blocking)"
	}
	return k
}

// requests returns the count of every request so far, by kind.
func (g *nomadGate) requests() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.byPath)
}

// demandListings counts the plugin's listings of blocked evaluations.
func (g *nomadGate) demandListings() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.blockedLists
}

// useToken makes the plugin's requests carry the token's secret.
func (g *nomadGate) useToken(secret string) { g.token.Store(&secret) }

// allocReads counts the plugin's reads of the node's allocations with the
// token.
func (g *nomadGate) allocReads(secret string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reads[secret]
}

// open lets the plugin's requests through to the cluster's Nomad API.
func (g *nomadGate) open(t testing.TB, c *localcluster.Cluster) {
	u, err := url.Parse(c.NomadAddr)
	if err != nil {
		t.Fatal(err)
	}
	g.target.Store(u)
}

// startBareCluster starts the agents with the plugin and returns as soon as
// the node is ready. The plugin reads the Nomad API through the returned
// gate: until it is opened, the plugin publishes no GPU.
func startBareCluster(t testing.TB) (*localcluster.Cluster, *nomadGate) {
	t.Helper()
	return startGatedCluster(t, localcluster.Options{})
}

// startGatedCluster is startBareCluster with more options (ACL).
func startGatedCluster(t testing.TB, opts localcluster.Options) (*localcluster.Cluster, *nomadGate) {
	t.Helper()
	return startGatedClusterWith(t, opts, pluginConfig)
}

// startGatedClusterWith is startGatedCluster with another plugin
// configuration.
func startGatedClusterWith(t testing.TB, opts localcluster.Options, pluginConfig string) (*localcluster.Cluster, *nomadGate) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs real agents; run without -short")
	}
	dir := t.TempDir()
	if err := localcluster.BuildBinary("github.com/gpushare/nomad-gpushare/device/cmd/nomad-device-gpushare", dir+"/nomad-device-gpushare"); err != nil {
		t.Fatal(err)
	}
	gate := newNomadGate(t)
	cfg := strings.Replace(pluginConfig, "config {", fmt.Sprintf("config {\n    nomad_address = %q", gate.URL), 1)
	opts.PluginDir, opts.PluginConfig = dir, cfg
	return testcluster.Start(t, opts), gate
}

// missingDevices reports whether an evaluation of the job found the node
// without a healthy instance of the requested device (the feasibility
// failure that Nomad caches per computed node class).
func missingDevices(c *localcluster.Cluster, job string) (bool, error) {
	evals, _, err := c.Nomad.Jobs().Evaluations(job, nil)
	if err != nil {
		return false, err
	}
	for _, e := range evals {
		for _, m := range e.FailedTGAllocs {
			if m.ConstraintFiltered["missing devices"] > 0 {
				return true, nil
			}
		}
	}
	return false, nil
}

// waitMissingDevices waits until the job's evaluation has failed on
// "missing devices" and checks that it is not placed.
func waitMissingDevices(t *testing.T, c *localcluster.Cluster, job string) {
	t.Helper()
	waitUnplaced(t, c, job, "failed on missing devices", func(e *nomadapi.Evaluation) bool {
		for _, m := range e.FailedTGAllocs {
			if m.ConstraintFiltered["missing devices"] > 0 {
				return true
			}
		}
		return false
	})
}

// waitUnplaced waits until an evaluation of the job matches (what says
// how) while the job has no allocation; an allocation fails the test.
func waitUnplaced(t *testing.T, c *localcluster.Cluster, job, what string, match func(*nomadapi.Evaluation) bool) {
	t.Helper()
	testcluster.Eventually(t, liveWindow, func() error {
		stubs, _, err := c.Nomad.Jobs().Allocations(job, false, nil)
		if err != nil {
			return err
		}
		if len(stubs) > 0 {
			t.Fatalf("%s was placed; no GPU should be offered to it yet", job)
		}
		evals, _, err := c.Nomad.Jobs().Evaluations(job, nil)
		if err != nil {
			return err
		}
		for _, e := range evals {
			if match(e) {
				return nil
			}
		}
		return fmt.Errorf("no evaluation of %s %s yet (%d evaluations)", job, what, len(evals))
	})
}

// runningAfter waits (at most liveWindow) for the job's allocation to run,
// and logs how long after since it did.
func runningAfter(t testing.TB, c *localcluster.Cluster, job string, since time.Time) *nomadapi.Allocation {
	t.Helper()
	var alloc *nomadapi.Allocation
	testcluster.Eventually(t, liveWindow, func() error {
		a, n, err := runningAllocation(c, job)
		if err != nil || a != nil {
			alloc = a
			return err
		}
		blocked, _ := missingDevices(c, job)
		return fmt.Errorf("%s not running %s after submission (%d allocations; failed on missing devices: %v)", job, time.Since(since).Round(time.Second), n, blocked)
	})
	t.Logf("%s running %s after submission", job, time.Since(since).Round(100*time.Millisecond))
	return alloc
}

// gpuOf returns the GPU UUID of an allocation's device instances.
func gpuOf(t testing.TB, a *nomadapi.Allocation) (uuid string, deviceIDs []string) {
	t.Helper()
	for _, d := range a.AllocatedResources.Tasks["main"].Devices {
		for _, raw := range d.DeviceIDs {
			id, err := vocab.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if uuid != "" && id.UUID != uuid {
				t.Fatalf("allocation %s spans GPUs %s and %s", a.ID, uuid, id.UUID)
			}
			uuid = id.UUID
			deviceIDs = append(deviceIDs, raw)
		}
	}
	return uuid, deviceIDs
}

// familyOf returns where the servers see a GPU allocatable: "whole",
// "share" or "none".
func familyOf(c *localcluster.Cluster, uuid string) (string, error) {
	node, _, err := c.Nomad.Nodes().Info(c.NodeID, nil)
	if err != nil {
		return "", err
	}
	fam := "none"
	for _, g := range node.NodeResources.Devices {
		for _, d := range g.Instances {
			id, err := vocab.Parse(d.ID)
			if err != nil || id.UUID != uuid || !d.Healthy {
				continue
			}
			if g.Type == "gpu" {
				fam = "whole"
			} else {
				fam = "share"
			}
		}
	}
	return fam, nil
}

// TestSharingOnRealNomad runs the sharing scenarios on one real Nomad agent
// with a simulated 4 x H100 node (min_idle_share_gpus 1, share_headroom
// 50, switch_settle_period 2s). The subtests run in order and each leaves
// the node idle (three whole GPUs and one share landing place). Waits are
// liveness bounds (liveWindow); how long each took is logged.
func TestSharingOnRealNomad(t *testing.T) {
	c, gate := startBareCluster(t)
	defer func() {
		if t.Failed() {
			t.Logf("nomad log tail:\n%s", c.NomadLogTail(80))
		}
	}()
	t.Run("jobs submitted before the first publication are placed", func(t *testing.T) { earlyJobsArePlaced(t, c, gate) })
	waitLayout(t, c, 3, 1)
	t.Run("four quarters share one GPU and it returns to whole", func(t *testing.T) { quartersShareOneGPU(t, c) })
	waitLayout(t, c, 3, 1)
	t.Run("60 and 50 never share; a whole job waits out all-shared", func(t *testing.T) { wholeWaitsOutAllShared(t, c) })
	waitLayout(t, c, 3, 1)
	t.Run("a fourth whole job gets the idle share landing place", func(t *testing.T) { fourthWholeTakesLandingPlace(t, c) })
	waitLayout(t, c, 3, 1)
	t.Run("a 60-share job that fits no share GPU gets an idle whole GPU switched", func(t *testing.T) { oversizeShareGetsWholeSwitched(t, c) })
	waitLayout(t, c, 3, 1)
	// 200 whole and share batch jobs of random sizes and lifetimes,
	// submitted in concurrent bursts.
	t.Run("stress", func(t *testing.T) { stress(t, c, 200) })
}

// earlyJobsArePlaced: jobs submitted while the node is registered but the
// plugin has not yet published any GPU (it has not read Nomad yet, then it
// settles) fail device feasibility. Nomad caches that per computed node
// class; they must still be placed once the families are published (`make
// demo` left them blocked forever).
func earlyJobsArePlaced(t *testing.T, c *localcluster.Cluster, gate *nomadGate) {
	if w, s, err := layout(c); err != nil || w != 0 || len(s) != 0 {
		t.Fatalf("precondition: GPUs published before the plugin read Nomad (%d whole, %v share, %v)", w, s, err)
	}
	start := time.Now()
	gpuJob(t, c, "early-whole", "gpu", 1)
	gpuJob(t, c, "early-share", "gpu-share", 25)
	waitMissingDevices(t, c, "early-whole")
	waitMissingDevices(t, c, "early-share")
	gate.open(t, c)
	runningAfter(t, c, "early-whole", start)
	runningAfter(t, c, "early-share", start)
	stopJob(t, c, "early-whole")
	stopJob(t, c, "early-share")
}

// quartersShareOneGPU: four quarter-GPU jobs pack onto the one share GPU
// and see its UUID; when their GPU's last tenant ends it returns to the
// whole family.
func quartersShareOneGPU(t *testing.T, c *localcluster.Cluster) {
	names := []string{"q1", "q2", "q3", "q4"}
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Add(1)
		go func() { defer wg.Done(); gpuJob(t, c, n, "gpu-share", 25) }()
	}
	wg.Wait()
	var gpu string
	held := map[string]string{}
	for _, n := range names {
		env, alloc := runningEnv(t, c, n)
		uuid, devs := gpuOf(t, alloc)
		if env["NVIDIA_VISIBLE_DEVICES"] != uuid || env["GPUSHARE_FRACTION"] != "0.25" || len(devs) != 25 {
			t.Errorf("%s: env %v, %d shares of %s", n, env, len(devs), uuid)
		}
		if gpu == "" {
			gpu = uuid
		} else if uuid != gpu {
			t.Errorf("%s is on GPU %s, the others on %s", n, uuid, gpu)
		}
		for _, d := range devs {
			if o, dup := held[d]; dup {
				t.Errorf("share %s held by %s and %s", d, o, n)
			}
			held[d] = n
		}
	}
	// The full GPU leaves no room: a second GPU becomes the landing
	// place, and a small tenant takes it (90 free shares are room).
	waitLayout(t, c, 2, 2)
	gpuJob(t, c, "keeper", "gpu-share", 10)
	_, keeper := runningEnv(t, c, "keeper")
	if k, _ := gpuOf(t, keeper); k == gpu {
		t.Fatalf("keeper landed on the full GPU %s", gpu)
	}
	for _, n := range names {
		stopJob(t, c, n)
	}
	start := time.Now()
	testcluster.Eventually(t, liveWindow, func() error {
		fam, err := familyOf(c, gpu)
		if err != nil {
			return err
		}
		if fam != "whole" {
			return fmt.Errorf("GPU %s is %s after its last share tenant ended", gpu, fam)
		}
		return nil
	})
	t.Logf("GPU back in the whole family %s after its last tenant was stopped (switchBound on an idle machine %s)", time.Since(start).Round(100*time.Millisecond), switchBound)
	stopJob(t, c, "keeper")
}

// wholeWaitsOutAllShared: 60 + 50 > 100, so a count = 60 and a count = 50
// never share a GPU. Three 60s and a 50 take all four GPUs into share
// mode; a whole-GPU job then finds no whole instance at all (feasibility
// fails, cached per class) and must be placed once tenants end and a GPU
// goes whole.
func wholeWaitsOutAllShared(t *testing.T, c *localcluster.Cluster) {
	gpus := map[string]string{}
	for _, j := range []struct {
		name  string
		count uint64
	}{{"s60a", 60}, {"s60b", 60}, {"s60c", 60}, {"s50", 50}} {
		gpuJob(t, c, j.name, "gpu-share", j.count)
		_, a := runningEnv(t, c, j.name)
		uuid, _ := gpuOf(t, a)
		if o, dup := gpus[uuid]; dup {
			t.Errorf("%s and %s share GPU %s", j.name, o, uuid)
		}
		gpus[uuid] = j.name
	}
	waitLayout(t, c, 0, 4)
	start := time.Now()
	gpuJob(t, c, "late-whole", "gpu", 1)
	waitMissingDevices(t, c, "late-whole")
	stopJob(t, c, "s60a")
	stopJob(t, c, "s60b")
	a := runningAfter(t, c, "late-whole", time.Now())
	if u, _ := gpuOf(t, a); gpus[u] != "s60a" && gpus[u] != "s60b" {
		t.Errorf("late-whole got GPU %s (%s)", u, gpus[u])
	}
	t.Logf("late-whole waited %s in all", time.Since(start).Round(100*time.Millisecond))
	for _, n := range []string{"s60c", "s50", "late-whole"} {
		stopJob(t, c, n)
	}
}

// fourthWholeTakesLandingPlace: with min_idle_share_gpus = 1 an idle node
// offers three whole GPUs and a share landing place. A fourth whole-GPU
// job waits (a blocked evaluation); no share demand needs the landing
// place, so it goes whole and the job runs.
func fourthWholeTakesLandingPlace(t *testing.T, c *localcluster.Cluster) {
	shareGroups := waitLayout(t, c, 3, 1)
	start := time.Now()
	names := []string{"w1", "w2", "w3", "w4"}
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Add(1)
		go func() { defer wg.Done(); gpuJob(t, c, n, "gpu", 1) }()
	}
	wg.Wait()
	held := map[string]string{}
	for _, n := range names {
		a := runningAfter(t, c, n, start)
		u, _ := gpuOf(t, a)
		if o, dup := held[u]; dup {
			t.Errorf("%s and %s both hold GPU %s", o, n, u)
		}
		held[u] = n
	}
	t.Logf("all four whole jobs running %s after submission (switchBound on an idle machine %s); the landing place was %v",
		time.Since(start).Round(100*time.Millisecond), switchBound, shareGroups)
	for _, n := range names {
		stopJob(t, c, n)
	}
}

// oversizeShareGetsWholeSwitched: a 50-share tenant on the only share GPU
// leaves 50 free shares, which share_headroom = 50 counts as room, so the
// plain policy keeps no idle GPU in share mode. A 60-share job does not
// fit there: its waiting demand switches an idle whole GPU to share.
func oversizeShareGetsWholeSwitched(t *testing.T, c *localcluster.Cluster) {
	gpuJob(t, c, "tenant50", "gpu-share", 50)
	_, ta := runningEnv(t, c, "tenant50")
	tenantGPU, _ := gpuOf(t, ta)
	waitLayout(t, c, 3, 1) // room: no landing place is added
	start := time.Now()
	gpuJob(t, c, "s60", "gpu-share", 60)
	a := runningAfter(t, c, "s60", start)
	if u, _ := gpuOf(t, a); u == tenantGPU {
		t.Errorf("s60 shares GPU %s with the 50-share tenant", u)
	}
	stopJob(t, c, "s60")
	stopJob(t, c, "tenant50")
}
