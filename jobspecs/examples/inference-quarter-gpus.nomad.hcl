# Four inference servers, each with a quarter of a GPU. The plugin keeps one
# GPU in share mode, so the four pack onto the same GPU and leave the others
# whole for training jobs.
job "inference" {
  type = "service"

  group "serve" {
    count = 4

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
