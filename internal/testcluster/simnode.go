package testcluster

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
)

// SimNode is a cluster whose node runs the gpushare device plugin on
// simulated H100s (81920 MiB each) with simulated GPU processes: a task
// that runs Simload (gpushare-simload) with -state-dir StateDir is an NVML
// process to the plugin, which serves the node's usage report at UsageURL
// (port UsagePort).
type SimNode struct {
	*localcluster.Cluster
	Simload, StateDir string
	UsageURL          string
	UsagePort         int
}

// StartSimNode builds the plugin and gpushare-simload and starts the
// agents with gpus simulated GPUs, no idle share landing place (a GPU is
// opened for shares by waiting demand) and the usage endpoint on a free
// port. It is skipped in -short mode, and stopped when the test ends.
func StartSimNode(t testing.TB, gpus int) *SimNode {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs real agents; run without -short")
	}
	pluginDir, binDir := t.TempDir(), t.TempDir()
	n := &SimNode{Simload: filepath.Join(binDir, "gpushare-simload")}
	buildSimBinaries(t, pluginDir, n.Simload)
	n.StateDir, n.UsagePort = simClientDirs(t)
	n.UsageURL = fmt.Sprintf("http://127.0.0.1:%d", n.UsagePort)
	n.Cluster = Start(t, localcluster.Options{PluginDir: pluginDir, PluginConfig: simPluginConfig(gpus, 0, n.UsagePort, n.StateDir, ""),
		WaitForDevices: []string{"nvidia/gpu"}})
	return n
}

// StartSimNodes starts a cluster of clients Nomad client nodes on this
// machine (localcluster.Options.Clients), each with the gpushare plugin
// on gpus simulated H100s of its own (distinct UUIDs, usage ports and
// process directories), configured as StartSimNode's except that each
// plugin keeps one idle GPU in share mode as the landing place for shares
// (min_idle_share_gpus, the plugin's default). It is skipped in
// -short mode, and stopped when the test ends.
func StartSimNodes(t testing.TB, clients, gpus int) *localcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs real agents; run without -short")
	}
	pluginDir := t.TempDir()
	buildSimBinaries(t, pluginDir, filepath.Join(t.TempDir(), "gpushare-simload"))
	configs := make([]string, clients)
	for i := range configs {
		dir, port := simClientDirs(t)
		configs[i] = simPluginConfig(gpus, 1, port, dir, fmt.Sprintf("client-%d", i))
	}
	return Start(t, localcluster.Options{PluginDir: pluginDir, Clients: clients,
		ClientPluginConfig: func(i int) string { return configs[i] }, WaitForDevices: []string{"nvidia/gpu"}})
}

// buildSimBinaries builds the device plugin into pluginDir and
// gpushare-simload to simload.
func buildSimBinaries(t testing.TB, pluginDir, simload string) {
	t.Helper()
	for pkg, out := range map[string]string{
		"github.com/gpushare/nomad-gpushare/device/cmd/nomad-device-gpushare": filepath.Join(pluginDir, "nomad-device-gpushare"),
		"github.com/gpushare/nomad-gpushare/device/cmd/gpushare-simload":      simload,
	} {
		if err := localcluster.BuildBinary(pkg, out); err != nil {
			t.Fatal(err)
		}
	}
}

// simClientDirs makes a simulated-process directory any task may write
// and picks a free port for the usage endpoint.
func simClientDirs(t testing.TB) (stateDir string, usagePort int) {
	t.Helper()
	stateDir = t.TempDir()
	if err := os.Chmod(stateDir, 0o777); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return stateDir, l.Addr().(*net.TCPAddr).Port
}

// simPluginConfig is the plugin block for gpus simulated H100s, minIdle
// of them kept in share mode while idle; seed, when set, derives their
// UUIDs.
func simPluginConfig(gpus, minIdle, usagePort int, stateDir, seed string) string {
	seedLine := ""
	if seed != "" {
		seedLine = fmt.Sprintf("simulated_seed        = %q", seed)
	}
	return fmt.Sprintf(`
plugin "nomad-device-gpushare" {
  config {
    backend               = "simulated"
    simulated_preset      = "h100"
    simulated_count       = %d
    %s
    fingerprint_period    = "1s"
    nomad_poll_period     = "500ms"
    min_idle_share_gpus   = %d
    switch_settle_period  = "2s"
    usage_listen          = "127.0.0.1:%d"
    simulated_process_dir = %q
  }
}
`, gpus, seedLine, minIdle, usagePort, stateDir)
}
