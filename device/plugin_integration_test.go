package device_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	nomadapi "github.com/hashicorp/nomad/api"
)

// The simulated 4-GPU test node (as jobspecs/demo/plugin.hcl).
const pluginConfig = `
plugin "nomad-device-gpushare" {
  config {
    backend              = "simulated"
    simulated_preset     = "h100"
    simulated_count      = 4
    fingerprint_period   = "1s"
    nomad_poll_period    = "500ms"
    min_idle_share_gpus  = 1
    switch_settle_period = "2s"
  }
}
`

// startCluster builds the plugin and starts real Consul and Nomad agents
// with it. Skipped in -short mode.
func startCluster(t testing.TB) (*localcluster.Cluster, string) {
	t.Helper()
	return startClusterWith(t, pluginConfig)
}

// startClusterWith is startCluster with another plugin configuration.
func startClusterWith(t testing.TB, pluginConfig string) (*localcluster.Cluster, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs real agents; run without -short")
	}
	dir := t.TempDir()
	if err := localcluster.BuildBinary("github.com/gpushare/nomad-gpushare/device/cmd/nomad-device-gpushare", filepath.Join(dir, "nomad-device-gpushare")); err != nil {
		t.Fatal(err)
	}
	return testcluster.Start(t, localcluster.Options{PluginDir: dir, PluginConfig: pluginConfig, WaitForDevices: []string{"nvidia/gpu", "nvidia/gpu-share"}}), dir
}

// logPluginLines logs the plugin's lines of the Nomad agent's log, but
// its HTTP requests: what it decided, and why, when a test fails.
func logPluginLines(t testing.TB, c *localcluster.Cluster) {
	for _, l := range strings.Split(c.NomadLogTail(1000000), "\n") {
		if strings.Contains(l, "gpushare") && !strings.Contains(l, "request complete") || strings.Contains(l, "allocations?index") {
			t.Log(l)
		}
	}
}

// pluginPIDs lists the running processes of the plugin binary in dir (the
// ones this test's Nomad agent started).
func pluginPIDs(dir string) []int {
	want := filepath.Join(dir, "nomad-device-gpushare")
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == want {
			pids = append(pids, pid)
		}
	}
	return pids
}

// layout summarizes the node's devices as the servers see them: healthy
// whole instances, and how many share groups have healthy instances.
func layout(c *localcluster.Cluster) (whole int, shareGroups []string, err error) {
	node, _, err := c.Nomad.Nodes().Info(c.NodeID, nil)
	if err != nil {
		return 0, nil, err
	}
	for _, g := range node.NodeResources.Devices {
		healthy := 0
		for _, d := range g.Instances {
			if d.Healthy {
				healthy++
			}
		}
		switch {
		case g.Vendor == "nvidia" && g.Type == "gpu":
			whole += healthy
		case g.Vendor == "nvidia" && g.Type == "gpu-share" && healthy > 0:
			shareGroups = append(shareGroups, g.Name)
		}
	}
	sort.Strings(shareGroups)
	return whole, shareGroups, nil
}

func waitLayout(t testing.TB, c *localcluster.Cluster, wantWhole, wantShare int) []string {
	t.Helper()
	var groups []string
	testcluster.Eventually(t, liveWindow, func() error {
		w, s, err := layout(c)
		if err != nil {
			return err
		}
		groups = s
		if w != wantWhole || len(s) != wantShare {
			return fmt.Errorf("%d whole GPUs and %d share groups allocatable, want %d and %d", w, len(s), wantWhole, wantShare)
		}
		return nil
	})
	return groups
}

// gpuJob registers a raw_exec service job whose task prints its GPU
// environment and then sleeps.
func gpuJob(t testing.TB, c *localcluster.Cluster, name, deviceType string, count uint64, constraints ...*nomadapi.Constraint) {
	t.Helper()
	gpuJobIn(t, c, "default", name, deviceType, count, constraints...)
}

// gpuJobIn is gpuJob in a namespace.
func gpuJobIn(t testing.TB, c *localcluster.Cluster, namespace, name, deviceType string, count uint64, constraints ...*nomadapi.Constraint) {
	t.Helper()
	job := nomadapi.NewServiceJob(name, name, "global", 50)
	job.Namespace = &namespace
	job.Datacenters = []string{"dc1"}
	task := nomadapi.NewTask("main", "raw_exec").
		SetConfig("command", "/bin/sh").
		SetConfig("args", []string{"-c", `env | grep -E '^(NVIDIA_VISIBLE_DEVICES|CUDA_VISIBLE_DEVICES|GPUSHARE_|TF_FORCE|XLA_)' | sort; exec sleep 3600`})
	task.Resources = &nomadapi.Resources{CPU: ptr(50), MemoryMB: ptr(32),
		Devices: []*nomadapi.RequestedDevice{{Name: "nvidia/" + deviceType, Count: &count, Constraints: constraints}}}
	group := nomadapi.NewTaskGroup("main", 1).AddTask(task)
	job.AddTaskGroup(group)
	if _, _, err := c.Nomad.Jobs().Register(job, &nomadapi.WriteOptions{Namespace: namespace}); err != nil {
		t.Fatalf("registering %s in %s: %v", name, namespace, err)
	}
}

func ptr[T any](v T) *T { return &v }

// runningAllocation returns the job's running allocation, nil while none
// runs, with the number of its allocations; a failed one is an error.
func runningAllocation(c *localcluster.Cluster, job string) (*nomadapi.Allocation, int, error) {
	stubs, _, err := c.Nomad.Jobs().Allocations(job, false, nil)
	if err != nil {
		return nil, 0, err
	}
	for _, s := range stubs {
		if s.ClientStatus == "failed" {
			a, _, _ := c.Nomad.Allocations().Info(s.ID, nil)
			return nil, len(stubs), fmt.Errorf("allocation %s failed: %v", s.ID, taskEvents(a))
		}
		if s.ClientStatus == "running" {
			a, _, err := c.Nomad.Allocations().Info(s.ID, nil)
			return a, len(stubs), err
		}
	}
	return nil, len(stubs), nil
}

// runningEnv waits for the job's allocation to run and returns the
// environment its task printed.
func runningEnv(t testing.TB, c *localcluster.Cluster, job string) (map[string]string, *nomadapi.Allocation) {
	t.Helper()
	var env map[string]string
	var alloc *nomadapi.Allocation
	testcluster.Eventually(t, liveWindow, func() error {
		a, n, err := runningAllocation(c, job)
		if err != nil {
			return err
		}
		if a == nil {
			return fmt.Errorf("no running allocation of %s (%d allocations)", job, n)
		}
		rc, err := c.Nomad.AllocFS().Cat(a, "alloc/logs/main.stdout.0", nil)
		if err != nil {
			return err
		}
		buf := new(strings.Builder)
		_, _ = fmt.Fprint(buf, readAll(rc))
		env = map[string]string{}
		for _, line := range strings.Split(buf.String(), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				env[k] = v
			}
		}
		if env["NVIDIA_VISIBLE_DEVICES"] == "" {
			return fmt.Errorf("allocation %s printed no GPU environment yet", a.ID)
		}
		alloc = a
		return nil
	})
	return env, alloc
}

func taskEvents(a *nomadapi.Allocation) string {
	if a == nil {
		return ""
	}
	var b strings.Builder
	for name, st := range a.TaskStates {
		for _, e := range st.Events {
			fmt.Fprintf(&b, "%s: %s %s; ", name, e.Type, e.DisplayMessage)
		}
	}
	return b.String()
}

func readAll(rc interface {
	Read([]byte) (int, error)
	Close() error
}) string {
	defer rc.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := rc.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

func stopJob(t testing.TB, c *localcluster.Cluster, job string) {
	t.Helper()
	if _, _, err := c.Nomad.Jobs().Deregister(job, true, nil); err != nil {
		t.Fatalf("stopping %s: %v", job, err)
	}
}

// TestPluginOnRealNomad runs the plugin under a real Nomad agent on a
// simulated 4 x H100 node: the partition, Reserve's environment, release
// tracking from the Nomad API, and a Nomad client restart.
func TestPluginOnRealNomad(t *testing.T) {
	c, pluginDir := startCluster(t)
	defer func() {
		if t.Failed() {
			logPluginLines(t, c)
		}
	}()

	// An idle node: three whole GPUs and one share landing place.
	landing := waitLayout(t, c, 3, 1)

	// A quarter GPU lands on the share GPU and gets its fraction.
	gpuJob(t, c, "quarter", "gpu-share", 25,
		&nomadapi.Constraint{LTarget: "${device.attr.memory}", Operand: ">=", RTarget: "40 GiB"},
		&nomadapi.Constraint{LTarget: "${device.attr.model}", Operand: "=", RTarget: "NVIDIA H100 80GB HBM3"})
	env, alloc := runningEnv(t, c, "quarter")
	want := map[string]string{"GPUSHARE_FRACTION": "0.25", "GPUSHARE_MEMORY_LIMIT_MIB": "20480",
		"TF_FORCE_GPU_ALLOW_GROWTH": "true", "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.25"}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	dev := alloc.AllocatedResources.Tasks["main"].Devices[0]
	if dev.Name != landing[0] || !strings.HasPrefix(dev.DeviceIDs[0], env["NVIDIA_VISIBLE_DEVICES"]+"-s") || env["CUDA_VISIBLE_DEVICES"] != env["NVIDIA_VISIBLE_DEVICES"] {
		t.Errorf("shares %v of group %s, env GPU %s", dev.DeviceIDs, dev.Name, env["NVIDIA_VISIBLE_DEVICES"])
	}
	// 75 shares left is room enough (share_headroom 50): nothing switches.
	waitLayout(t, c, 3, 1)

	// Stats reach the node's stats, per GPU and per share group.
	testcluster.Eventually(t, liveWindow, func() error {
		hs, err := c.Nomad.Nodes().Stats(c.NodeID, nil)
		if err != nil {
			return err
		}
		for _, g := range hs.DeviceStats {
			if g.Type == "gpu-share" && g.Name == landing[0] {
				st := g.InstanceStats[dev.DeviceIDs[0]]
				if st == nil || st.Stats == nil || st.Stats.Attributes["shares_held"] == nil {
					return fmt.Errorf("share stats %+v", st)
				}
				if held := *st.Stats.Attributes["shares_held"].IntNumeratorVal; held != 25 {
					return fmt.Errorf("shares_held = %d, want 25", held)
				}
				return nil
			}
		}
		return fmt.Errorf("no stats for share group %s in %d groups", landing[0], len(hs.DeviceStats))
	})

	// A whole-GPU job gets one GPU by UUID.
	gpuJob(t, c, "whole", "gpu", 1)
	env, alloc = runningEnv(t, c, "whole")
	if id := alloc.AllocatedResources.Tasks["main"].Devices[0].DeviceIDs[0]; env["NVIDIA_VISIBLE_DEVICES"] != id || env["GPUSHARE_FRACTION"] != "" {
		t.Errorf("whole GPU %s, env %v", id, env)
	}

	// 70 more shares fill the landing GPU past its room: an idle whole GPU
	// is withdrawn, settles and is published as shares.
	gpuJob(t, c, "big", "gpu-share", 70)
	runningEnv(t, c, "big")
	waitLayout(t, c, 2, 2)

	// The Nomad client restarts; the tasks keep running and the plugin
	// rebuilds its state from the API: the same layout, nothing switched.
	if err := c.RestartNomad(); err != nil {
		t.Fatalf("restarting nomad: %v", err)
	}
	waitLayout(t, c, 2, 2)
	// Reserve works from the rebuilt state: a new share job lands.
	gpuJob(t, c, "after-restart", "gpu-share", 5)
	if env, _ := runningEnv(t, c, "after-restart"); env["GPUSHARE_FRACTION"] != "0.05" {
		t.Errorf("after restart: GPUSHARE_FRACTION = %q", env["GPUSHARE_FRACTION"])
	}
	stopJob(t, c, "after-restart")

	// The plugin itself crashes; Nomad starts it again and it rebuilds the
	// same state from the API.
	old := pluginPIDs(pluginDir)
	if len(old) != 1 {
		t.Fatalf("plugin processes: %v", old)
	}
	if err := syscall.Kill(old[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, liveWindow, func() error {
		if now := pluginPIDs(pluginDir); len(now) != 1 || now[0] == old[0] {
			return fmt.Errorf("plugin processes %v (killed %d)", now, old[0])
		}
		return nil
	})
	if got := waitLayout(t, c, 2, 2); !contains(got, landing[0]) {
		t.Errorf("share groups after the plugin restart %v lack %s, which has tenants", got, landing[0])
	}

	// Releases are seen through the API: when the share jobs stop, the
	// extra share GPU goes back to whole.
	stopJob(t, c, "quarter")
	stopJob(t, c, "big")
	waitLayout(t, c, 3, 1)
	stopJob(t, c, "whole")
	waitLayout(t, c, 3, 1)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
