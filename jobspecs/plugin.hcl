# Nomad client configuration that loads the gpushare device plugin on a host
# with NVIDIA GPUs. Put the plugin binary (nomad-device-gpushare) in the
# client's plugin_dir and add this block to the client's configuration.
#
# Do not load HashiCorp's nvidia plugin (nvidia-gpu) on the same client:
# both offer the same GPUs as nvidia/gpu, and Nomad could give one GPU
# through both. This plugin offers whole GPUs and MIG devices as that one
# does, and warns when it finds the other's device groups on the node.
plugin "nomad-device-gpushare" {
  config {
    # false turns the plugin off (it offers nothing).
    enabled = true

    backend = "nvml"

    # How often NVML is read for new, vanished or failing GPUs.
    fingerprint_period = "5s"

    # GPUs (UUIDs) this plugin must never offer.
    ignored_gpu_ids = []

    # Partition policy for idle GPUs that no waiting job asks for: keep
    # this many in share mode as a landing place for fractional jobs while
    # the shared GPUs lack room (share_headroom free shares); offer every
    # other idle GPU whole.
    min_idle_share_gpus = 1

    # Share instances per GPU (a divisor of 100 from 2 to 100). Each stands
    # for 100/shares_per_gpu hundredths of the GPU; a job asks for a
    # fraction f with device "nvidia/gpu-share" { count = f * shares_per_gpu }.
    # Fewer instances make the node's JSON in Nomad smaller (docs/design.md,
    # Units and device families). Use one value across the cluster.
    shares_per_gpu = 100

    # How long a GPU that is switching between whole and shared waits for
    # plans already in flight to settle before it is published again.
    switch_settle_period = "10s"

    # The local agent's HTTP API, used to learn which GPUs are in use and
    # which GPU work waits (blocked evaluations, in every namespace), so
    # that idle GPUs move to the family that waiting work needs, oldest
    # first. Empty: NOMAD_ADDR, else http://127.0.0.1:4646.
    # nomad_address = "http://127.0.0.1:4646"

    # With ACLs on, a token made from jobspecs/acl/nomad-gpushare-plugin.policy.hcl
    # (node read, read-job in every namespace; terraform/ makes it). Empty:
    # NOMAD_TOKEN from the client's environment. Nomad hides from a token
    # the allocations of namespaces it cannot read, so a GPU held there
    # would look idle: the plugin checks its token's policies on every
    # read and, unless they grant read-job in every namespace, it switches
    # no GPU between the families, refuses reservations outside the family
    # a GPU is offered in, and logs what the token lacks.
    # nomad_token = "..."

    # Shares get hard memory and compute limits through CUDA MPS: the
    # NVIDIA MPS control daemon must run with this pipe directory
    # (CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps nvidia-cuda-mps-control -d).
    # The plugin checks its control socket at every fingerprint and, while
    # it does not answer, offers no shares (CUDA would run them without
    # MPS). Without MPS the limits are not enforced by CUDA: share groups
    # say isolation = "none", and tasks get GPUSHARE_ISOLATION=none; the
    # memory limit is then enforced by the monitor below (memory_enforcement).
    # With MPS the hard caps are the task's gpushare_limit.
    mps_enabled        = false
    mps_pipe_directory = "/tmp/nvidia-mps"

    # Xid errors that mark a GPU unhealthy until the plugin restarts (reset
    # the GPU, then restart the Nomad client). Uncorrectable ECC errors and
    # a failed row remapping mark it unhealthy too.
    xid_critical = [48, 62, 63, 64, 74, 79]

    # Dynamic fractions and the node-level scheduler (docs/design.md).
    # Every monitor_period the GPU processes are charged to the Nomad
    # tasks that hold GPU devices (read from /proc: raw_exec, exec and
    # docker tasks), and the borrowing rule is applied: a task above its
    # gpushare_limit is killed; a task above its request is killed, the
    # most above first, when a task below its request could no longer grow
    # by reclaim_headroom of the GPU at once. "report" only logs and counts.
    monitor_period     = "500ms"
    memory_enforcement = "kill"
    reclaim_headroom   = "0.1"

    # Burstable share tasks (gpushare_limit above their request) whose GPU
    # has other tenants run on an idle whole GPU as guests; when Nomad
    # binds that GPU whole, the guest's allocation is stopped (Nomad places
    # it again) and the whole task starts once the guest's processes are
    # gone, within guest_move_timeout. The token needs alloc-lifecycle in
    # the namespaces of such tasks.
    spread             = true
    guest_move_timeout = "30s"

    # Per-task GPU usage as JSON at /v1/usage (the quota service reads it)
    # and Prometheus metrics at /metrics. Empty: not served.
    usage_listen = ":9410"
  }
}
