# The demo's reclaim story, step 1 (`make demo-screenshot` runs it; by hand:
# nomad job run jobspecs/demo/reclaim/sweep.nomad.hcl): one more whole-GPU
# job of project "default", which then borrows idle GPUs above its
# guarantee of 2.
job "sweep" {
  type = "batch"

  group "sweep" {
    task "sweep" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"sweep on GPU $NVIDIA_VISIBLE_DEVICES\"; while true; do sleep 3600; done"]
      }

      resources {
        cpu    = 100
        memory = 64

        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
