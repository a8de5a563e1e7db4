# The demo's dynamic-fractions story (`make demo` prints the steps): a
# notebook that asks for half a GPU (50 shares) and may burst to a whole
# one (meta gpushare_limit = "1.0"; docs/design.md, "Dynamic fractions").
# gpushare-simload stands in for the framework on the simulated H100: it
# uses 70,000 MiB of the GPU's 81,920, above its request of 40,960. When
# the reclaim rule kills it to give another tenant's request back, Nomad
# restarts it, and it comes back within its request (30,000 MiB).
#
# Its two variables are set by the demo's env file (NOMAD_VAR_simload and
# NOMAD_VAR_process_dir).
variable "simload" {
  description = "Path of the gpushare-simload binary."
  type        = string
}

variable "process_dir" {
  description = "The plugin's simulated_process_dir, where simulated GPU processes are written."
  type        = string
}

job "notebook-a" {
  type = "service"

  group "notebook" {
    restart {
      attempts = 5
      interval = "10m"
      delay    = "1s"
      mode     = "fail"
    }

    task "notebook" {
      driver       = "raw_exec"
      kill_timeout = "2s"

      config {
        command = var.simload
        args    = ["-state-dir", var.process_dir, "-mib", "70000", "-sm", "60", "-restart-mib", "30000", "-restart-sm", "20"]
      }

      meta {
        gpushare_limit = "1.0"
      }

      resources {
        cpu    = 100
        memory = 32

        device "nvidia/gpu-share" {
          count = 50
        }
      }
    }
  }
}
