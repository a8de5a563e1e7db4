# The demo's dynamic-fractions story, last step: a training job that asks
# for a whole GPU. For Nomad the GPU where the node-level scheduler runs a
# notebook as a guest is free, so the job is placed there; the plugin sends
# the guest back to its home GPU before the job starts (it checks that it
# runs alone: -require-exclusive), and the reclaim rule kills the notebook
# that borrows memory the other's request needs.
variable "simload" {
  description = "Path of the gpushare-simload binary."
  type        = string
}

variable "process_dir" {
  description = "The plugin's simulated_process_dir, where simulated GPU processes are written."
  type        = string
}

job "train" {
  type = "service"

  group "train" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    task "train" {
      driver       = "raw_exec"
      kill_timeout = "2s"

      config {
        command = var.simload
        args    = ["-state-dir", var.process_dir, "-mib", "60000", "-sm", "90", "-require-exclusive"]
      }

      resources {
        cpu    = 100
        memory = 32

        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
