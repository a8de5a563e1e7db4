# Nomad client configuration that loads the gpushare device plugin on a host
# with NVIDIA GPUs. Put the plugin binary (nomad-device-gpushare) in the
# client's plugin_dir and add this block to the client's configuration.
plugin "nomad-device-gpushare" {
  config {
    backend = "nvml"

    # How often NVML is read for new, vanished or failing GPUs.
    fingerprint_period = "5s"

    # GPUs (UUIDs) this plugin must never offer.
    ignored_gpu_ids = []

    # Partition policy: keep this many idle GPUs in share mode as a landing
    # place for fractional jobs while the shared GPUs lack room; every other
    # idle GPU is offered whole.
    min_idle_share_gpus = 1

    # How long a GPU that is switching between whole and shared waits for
    # plans already in flight to settle before it is published again.
    switch_settle_period = "10s"

    # The local agent's HTTP API, used to learn which GPUs are in use.
    # Empty: NOMAD_ADDR, else http://127.0.0.1:4646. Token: NOMAD_TOKEN.
    # nomad_address = "http://127.0.0.1:4646"

    # With the NVIDIA MPS control daemon running, shares get hard memory
    # and compute limits through MPS.
    mps_enabled        = false
    mps_pipe_directory = "/tmp/nvidia-mps"
  }
}
