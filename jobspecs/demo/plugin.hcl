# The gpushare device plugin on simulated GPUs: four H100 80GB built on
# go-nvml's mock machines. Used by `make demo` and the integration tests.
plugin "nomad-device-gpushare" {
  config {
    backend          = "simulated"
    simulated_preset = "h100"
    simulated_count  = 4

    fingerprint_period   = "1s"
    min_idle_share_gpus  = 1
    switch_settle_period = "2s"
    nomad_poll_period    = "1s"
  }
}
