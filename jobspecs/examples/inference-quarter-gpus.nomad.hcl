# Four inference servers, each with a quarter of a GPU. The plugin keeps one
# GPU in share mode, so the four pack onto the same GPU and leave the others
# whole for training jobs.
job "inference" {
  type = "service"

  group "serve" {
    count = 4

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

    task "serve" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          echo "inference replica $NOMAD_ALLOC_INDEX on GPU $NVIDIA_VISIBLE_DEVICES with $GPUSHARE_MEMORY_LIMIT_MIB MiB"
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
