# A notebook that asks for a quarter of one GPU: 25 shares of 1% each. It sees
# the GPU's UUID and the memory it may use; frameworks are told to grow their
# memory use instead of grabbing the whole GPU.
job "notebook" {
  type = "service"

  group "notebook" {

    # Placement ranking (docs/design.md): prefer the nodes where this
    # group's class (a quarter GPU and at most 1000 MHz) fragments no GPU, as
    # the quota service publishes them. The class is the group's GPU ask
    # (s<shares> or w<GPUs>) and c<N>, N the smallest power of two of
    # cores (1000 MHz each) at or above its CPU ask.
    affinity {
      attribute = "${meta.gpushare.rank.s25-c1}"
      value     = "1"
      weight    = 100
    }
    task "jupyter" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          echo "notebook on GPU $NVIDIA_VISIBLE_DEVICES"
          echo "fraction $GPUSHARE_FRACTION, memory limit $GPUSHARE_MEMORY_LIMIT_MIB MiB"
          echo "TF_FORCE_GPU_ALLOW_GROWTH=$TF_FORCE_GPU_ALLOW_GROWTH XLA_PYTHON_CLIENT_MEM_FRACTION=$XLA_PYTHON_CLIENT_MEM_FRACTION"
          while true; do sleep 3600; done
        EOT
        ]
      }

      resources {
        cpu    = 100
        memory = 64

        device "nvidia/gpu-share" {
          count = 25
        }
      }
    }
  }
}
