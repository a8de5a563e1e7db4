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
	n := &SimNode{Simload: filepath.Join(binDir, "gpushare-simload"), StateDir: t.TempDir()}
	for pkg, out := range map[string]string{
		"github.com/gpushare/nomad-gpushare/device/cmd/nomad-device-gpushare": filepath.Join(pluginDir, "nomad-device-gpushare"),
		"github.com/gpushare/nomad-gpushare/device/cmd/gpushare-simload":      n.Simload,
	} {
		if err := localcluster.BuildBinary(pkg, out); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(n.StateDir, 0o777); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.UsagePort = l.Addr().(*net.TCPAddr).Port
	l.Close()
	n.UsageURL = fmt.Sprintf("http://127.0.0.1:%d", n.UsagePort)
	cfg := fmt.Sprintf(`
plugin "nomad-device-gpushare" {
  config {
    backend               = "simulated"
    simulated_preset      = "h100"
    simulated_count       = %d
    fingerprint_period    = "1s"
    nomad_poll_period     = "500ms"
    min_idle_share_gpus   = 0
    switch_settle_period  = "2s"
    usage_listen          = "127.0.0.1:%d"
    simulated_process_dir = %q
  }
}
`, gpus, n.UsagePort, n.StateDir)
	n.Cluster = Start(t, localcluster.Options{PluginDir: pluginDir, PluginConfig: cfg, WaitForDevices: []string{"nvidia/gpu"}})
	return n
}
