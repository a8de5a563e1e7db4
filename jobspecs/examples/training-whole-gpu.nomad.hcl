# A training job that needs one whole GPU, as with HashiCorp's nvidia plugin.
job "training" {
  type = "batch"

  group "train" {
    task "train" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args = ["-c", <<-EOT
          echo "training on GPU $NVIDIA_VISIBLE_DEVICES"
          i=0
          while [ $i -lt 600 ]; do echo "epoch $i"; i=$((i+1)); sleep 5; done
        EOT
        ]
      }

      resources {
        cpu    = 200
        memory = 64

        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
