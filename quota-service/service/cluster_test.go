package service_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
)

// wholeOnlyPluginConfig is the simulated 4-GPU node of jobspecs/demo
// with no idle GPU kept in the share family, so that whole-GPU tests can
// use all four GPUs (with the demo's min_idle_share_gpus = 1 an idle node
// offers only three whole GPUs).
const wholeOnlyPluginConfig = `
plugin "nomad-device-gpushare" {
  config {
    backend              = "simulated"
    simulated_preset     = "h100"
    simulated_count      = 4
    fingerprint_period   = "1s"
    min_idle_share_gpus  = 0
    switch_settle_period = "2s"
    nomad_poll_period    = "1s"
  }
}
`

// demoPluginConfig is jobspecs/demo/plugin.hcl: one idle GPU is kept in
// the share family as a landing place for fractional work.
const demoPluginConfig = `
plugin "nomad-device-gpushare" {
  config {
    backend              = "simulated"
    simulated_preset     = "h100"
    simulated_count      = 4
    fingerprint_period   = "1s"
    min_idle_share_gpus  = 1
    switch_settle_period = "2s"
    nomad_poll_period    = "1s"
  }
}
`

// newGPUCluster builds the gpushare device plugin and starts Consul and
// Nomad with it on simulated GPUs, waiting for the given device families.
func newGPUCluster(pluginConfig string, families ...string) (*localcluster.Cluster, error) {
	return newGPUClusterWith(pluginConfig, nil, families...)
}

// newGPUClusterWith is newGPUCluster with options tweaked.
func newGPUClusterWith(pluginConfig string, tweak func(*localcluster.Options), families ...string) (*localcluster.Cluster, error) {
	dir, err := os.MkdirTemp("", "gpushare-quota-plugins-")
	if err != nil {
		return nil, fmt.Errorf("creating the plugin dir: %w", err)
	}
	out := filepath.Join(dir, "nomad-device-gpushare")
	if err := localcluster.BuildBinary("github.com/gpushare/nomad-gpushare/device/cmd/nomad-device-gpushare", out); err != nil {
		return nil, fmt.Errorf("building the device plugin: %w", err)
	}
	opts := localcluster.Options{PluginDir: dir, PluginConfig: pluginConfig, WaitForDevices: families}
	if tweak != nil {
		tweak(&opts)
	}
	return localcluster.New(opts)
}
