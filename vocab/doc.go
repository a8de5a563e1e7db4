// Package vocab is the vocabulary that the gpushare device plugin, the
// quota service and the scheduler share: the unit of GPU, the names of the
// two device families and their attributes, the instance IDs the plugin
// publishes, a job's device request and limit as the plugin reads them,
// what an allocation holds (Held), and the health descriptions of a GPU
// withdrawn on purpose. It depends on nothing but the standard library;
// package nomadread reads it out of Nomad's API objects, package nodeusage
// is the plugin's usage report on the wire.
//
// Units. A unit is a hundredth of a GPU, memory and compute alike
// (UnitsPerGPU to a GPU): asks, quotas and held devices all count in it
// (the scheduler calls it a share, cluster.Shares).
//
// Instance IDs. A whole GPU is published under its NVML UUID (for example
// "GPU-5b2e0c8a-...") in the family Vendor/TypeWhole. By default each of
// its DefaultSharesPerGPU share instances, one unit each, is published in
// the family Vendor/TypeShare as "<UUID>-sNN" with NN in 00..99, so that
// every instance ID names the physical GPU it belongs to and Reserve can
// validate a request from the IDs alone.
//
// A plugin configured with fewer share instances per GPU (shares_per_gpu,
// a divisor of 100) publishes instances that each stand for several units
// and says how many in the ID: "<UUID>-uWW-sNN", WW units each, NN in
// 00..shares_per_gpu-1. Every reader of an allocation's devices
// (nomadread.HeldDevices) thus counts units without knowing the node's
// setting.
package vocab

// UnitsPerGPU is the number of units in one GPU: a unit is a hundredth of
// a GPU, the one unit of GPU that asks, quotas and held devices count in.
const UnitsPerGPU = 100

// DefaultSharesPerGPU is the number of share instances the plugin
// publishes per GPU unless configured otherwise (shares_per_gpu): one per
// unit, so that a request's count is the fraction in hundredths of a GPU.
const DefaultSharesPerGPU = UnitsPerGPU

// The plugin's default publication policy (its configuration's
// min_idle_share_gpus and share_headroom), which the scheduler's model of
// the deployment assumes (scheduler/placement's "deployed" policies): idle
// GPUs kept in share mode as a landing place while no in-use share GPU
// has DefaultShareHeadroom free units.
const (
	DefaultMinIdleShareGPUs = 1
	DefaultShareHeadroom    = 50
)
