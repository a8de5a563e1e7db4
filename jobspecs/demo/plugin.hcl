# The gpushare device plugin on simulated GPUs: four H100 80GB built on
# go-nvml's mock machines. Used by `make demo` and the integration tests.
#
# The simulated GPUs' processes are gpushare-simload tasks, which write
# what they use under simulated_process_dir; the plugin sees them as NVML
# processes, and its node-level scheduler moves and kills them as it would
# real ones. `make demo` puts that directory under its own and serves the
# usage report on a free port (these two lines are rewritten).
plugin "nomad-device-gpushare" {
  config {
    backend          = "simulated"
    simulated_preset = "h100"
    simulated_count  = 4

    fingerprint_period   = "1s"
    min_idle_share_gpus  = 1
    switch_settle_period = "2s"
    nomad_poll_period    = "1s"

    usage_listen          = "127.0.0.1:9410"
    simulated_process_dir = "/tmp/gpushare-demo/processes"
  }
}
