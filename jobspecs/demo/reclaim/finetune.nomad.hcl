# The demo's reclaim story, step 2: project "research" asks for the 2 GPUs
# it is guaranteed while "default" borrows them; the quota service suspends
# jobs of "default" to make room, and resumes them when research's end
# (nomad job stop -namespace research finetune).
job "finetune" {
  namespace = "research"
  type      = "batch"

  group "finetune" {
    count = 2

    task "finetune" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo \"finetune worker $NOMAD_ALLOC_INDEX on GPU $NVIDIA_VISIBLE_DEVICES\"; while true; do sleep 3600; done"]
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
