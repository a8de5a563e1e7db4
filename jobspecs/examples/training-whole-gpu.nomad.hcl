# A training job that needs one whole GPU, as with HashiCorp's nvidia plugin.
job "training" {
  type = "batch"

  group "train" {

    # Placement ranking (docs/design.md): prefer the nodes where this
    # group's class (one whole GPU and at most 1000 MHz) fragments no GPU, as
    # the quota service publishes them. The class is the group's GPU ask
    # (s<shares> or w<GPUs>) and c<N>, N the smallest power of two of
    # cores (1000 MHz each) at or above its CPU ask.
    affinity {
      attribute = "${meta.gpushare.rank.w1-c1}"
      value     = "1"
      weight    = 100
    }
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
