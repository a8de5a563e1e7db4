# The gpushare quota service: two instances; a Consul lock makes one of them
# act, the other takes over within seconds. Each serves the HTTP status API,
# the dashboard and Prometheus metrics on a dynamic port of its node's
# address (Consul's health check and people reach it there), registered in
# Consul as "gpushare-quota". With Nomad's ACLs on, the status and the
# dashboard ask for a Nomad token and show the namespaces it can read;
# /v1/health and /metrics answer without one.
#
# The binary comes from the release archive (make dist), fetched by Nomad
# with its checksum from SHA256SUMS:
#
#   nomad job run \
#     -var artifact_url=https://example.com/gpushare-quota_0.2.0_linux_amd64.tar.gz \
#     -var artifact_checksum=sha256:<its line in SHA256SUMS> \
#     jobspecs/quota-service.nomad.hcl
#
# or from a path on the client nodes (no artifact_url):
#
#   nomad job run -var binary=/usr/local/bin/gpushare-quota jobspecs/quota-service.nomad.hcl
#
# What each driver needs on the client nodes that run it:
#
#   exec (the default): Linux, the Nomad client running as root, and the
#     cgroups Nomad needs for isolation; exec is enabled by default. The task runs in a chroot built from the client's
#     chroot_env (by default /bin, /etc, /lib, /lib64, /sbin, /usr, ...):
#     a host binary must lie there (/usr/local/bin is), and so must the
#     tls_cert and tls_key files (e.g. under /etc), readable by the user
#     exec runs the task as (nobody by default). The binary is static (CGO_ENABLED=0),
#     so the chroot needs no libraries for it. The first task on a client
#     waits while Nomad builds the chroot (tens of seconds).
#   raw_exec: no isolation; Nomad disables it by default
#     (plugin "raw_exec" { config { enabled = true } } turns it on), and
#     many clusters forbid it. Any host path works. The demo
#     (internal/demo) uses it, since it runs the agents as a normal user.
#
# Both drivers run the task on the host's network, where the service
# reaches Nomad and Consul at nomad_addr and consul_addr.

variable "driver" {
  description = "Task driver: exec (isolated; the default) or raw_exec (see above)."
  type        = string
  default     = "exec"
  validation {
    condition     = contains(["exec", "raw_exec"], var.driver)
    error_message = "The driver must be exec or raw_exec."
  }
}

variable "artifact_url" {
  description = "URL of the quota service's release archive (gpushare-quota_<version>_linux_<arch>.tar.gz, from make dist), which Nomad fetches and unpacks into the task's local/ directory. Empty: run binary from the client nodes."
  type        = string
  default     = ""
}

variable "artifact_checksum" {
  description = "Checksum of artifact_url, as sha256:<hex> (the archive's line in SHA256SUMS). Required with artifact_url: without it the download fails."
  type        = string
  default     = ""
  validation {
    # Nomad has regex_replace, not regex: a match leaves nothing.
    condition     = var.artifact_checksum == "" || regex_replace(var.artifact_checksum, "^sha256:[0-9a-f]{64}$", "") == ""
    error_message = "The artifact_checksum must be sha256:<64 hex digits>, the archive's checksum in SHA256SUMS."
  }
}

variable "binary" {
  description = "Path of the gpushare-quota binary on the client nodes, used when artifact_url is empty (with exec: inside the chroot, e.g. under /usr/local/bin)."
  type        = string
  default     = "/usr/local/bin/gpushare-quota"
}

variable "nomad_addr" {
  description = "Nomad HTTP API the service watches and acts through."
  type        = string
  default     = "http://127.0.0.1:4646"
}

variable "consul_addr" {
  description = "Consul HTTP API holding quotas, state and the leader lock."
  type        = string
  default     = "127.0.0.1:8500"
}

variable "usage_port" {
  description = "The device plugins' usage_listen port: the service reads each GPU node's usage there (per-project used vs allocated). 0 reads none."
  type        = number
  default     = 9410
}

variable "usage_period" {
  description = "How often the service reads the GPU nodes' usage (a Go duration such as \"15s\")."
  type        = string
  default     = "15s"
}

variable "kv_prefix" {
  description = "Root of the service's Consul keys."
  type        = string
  default     = "gpushare"
}

variable "tls_cert" {
  description = "Path on the client nodes of a PEM certificate (chain) for the HTTP API: set it and tls_key to serve HTTPS (the health check then uses HTTPS)."
  type        = string
  default     = ""
}

variable "tls_key" {
  description = "Path on the client nodes of the private key of tls_cert."
  type        = string
  default     = ""
}

# Sized from the scale benchmark (make bench-scale, tools/scalebench;
# docs/scale.md): with GOMEMLIMIT at 90% of memory_mb (set below), the
# service at 5,000 GPU nodes and 100,000 allocations peaks at 900 MiB
# with memory_mb = 1024 and a busy cluster (50 events/s) keeps it at
# about 106% of one core there; with 512 the garbage collector runs
# almost without pause (179%, a mean cycle of 2.5 s against 0.7 s). 10,000 nodes
# peak at 1,930 MiB: give them 2048. Give a cluster of thousands of
# nodes cpu_mhz = 3000.
variable "memory_mb" {
  description = "Memory reserved for each instance, in MiB (1024 fits 5,000 GPU nodes, 2048 fits 10,000; see above)."
  type        = number
  default     = 1024
}

variable "cpu_mhz" {
  description = "CPU reserved for each instance, in MHz."
  type        = number
  default     = 1000
}

variable "record_key_var" {
  description = "Nomad Variable (in the default namespace) holding the keys that sign the service's suspension records; the service creates it when absent. Its Nomad policy must grant read and write on it (jobspecs/acl/nomad-gpushare-quota.policy.hcl)."
  type        = string
  default     = "gpushare/record-key"
}

variable "demand_var" {
  description = "Path prefix of the Nomad Variables (default namespace) where the leader publishes each GPU node's demand for the device plugins (docs/design.md, Partition protocol, Published demand); the plugins' demand_var must match. Its Nomad policy must grant read, write, list and destroy on <prefix>/* (jobspecs/acl/nomad-gpushare-quota.policy.hcl)."
  type        = string
  default     = "gpushare/demand"
}

variable "publish_ranks" {
  description = "Publish placement ranks as Nomad dynamic node metadata gpushare.rank.<class> (docs/design.md, Placement ranking); needs node write in the service's Nomad policy."
  type        = bool
  default     = true
}

variable "tokens_from_variable" {
  description = "With ACLs on: read NOMAD_TOKEN and CONSUL_HTTP_TOKEN from the Nomad Variable nomad/jobs/gpushare-quota (items nomad_token and consul_token), which only this job's tasks can read."
  type        = bool
  default     = false
}

job "gpushare-quota" {
  type     = "service"
  priority = 90

  group "quota" {
    count = 2

    # Two instances on different nodes where there are several.
    spread {
      attribute = "${node.unique.id}"
    }

    network {
      port "http" {}
    }

    service {
      name     = "gpushare-quota"
      provider = "consul"
      port     = "http"

      check {
        type     = "http"
        protocol = var.tls_cert != "" ? "https" : "http"
        # The check reaches the allocation's IP, which the certificate
        # may not name; it sends no token and reads only ok or not.
        tls_skip_verify = var.tls_cert != ""
        path            = "/v1/health"
        interval        = "10s"
        timeout         = "2s"
      }
    }

    restart {
      attempts = 10
      interval = "5m"
      delay    = "5s"
      mode     = "delay"
    }

    task "quota" {
      driver = var.driver

      # The release archive, checked against its checksum before it is
      # unpacked. A missing artifact_checksum fails the download (the
      # all-zero checksum below never matches): the binary never runs
      # unchecked.
      dynamic "artifact" {
        for_each = var.artifact_url != "" ? [var.artifact_url] : []
        content {
          source      = artifact.value
          destination = "local/"
          options {
            checksum = var.artifact_checksum != "" ? var.artifact_checksum : "sha256:0000000000000000000000000000000000000000000000000000000000000000"
          }
        }
      }

      config {
        command = var.artifact_url != "" ? "local/gpushare-quota" : var.binary
        args = [
          "-listen", "${NOMAD_ADDR_http}",
          "-instance", "${NOMAD_ALLOC_ID}",
        ]
      }

      # NOMAD_CACERT, CONSUL_CACERT and the other TLS variables of the
      # Nomad and Consul clients are read here too: add them to this block
      # when the agents serve HTTPS.
      env {
        NOMAD_ADDR              = var.nomad_addr
        CONSUL_HTTP_ADDR        = var.consul_addr
        GPUSHARE_KV_PREFIX      = var.kv_prefix
        GPUSHARE_TLS_CERT       = var.tls_cert
        GPUSHARE_TLS_KEY        = var.tls_key
        GPUSHARE_USAGE_PORT     = var.usage_port
        GPUSHARE_USAGE_PERIOD   = var.usage_period
        GPUSHARE_PUBLISH_RANKS  = var.publish_ranks ? "true" : "false"
        GPUSHARE_RECORD_KEY_VAR = var.record_key_var
        GPUSHARE_DEMAND_VAR     = var.demand_var
        # Go's garbage collector works to stay below 90% of the memory
        # reserved, rather than doubling the heap before it collects.
        GOMEMLIMIT = "${floor(var.memory_mb * 0.9)}MiB"
      }

      # The service reads NOMAD_TOKEN and CONSUL_HTTP_TOKEN from its
      # environment. With ACLs on, store tokens made from the policies in
      # jobspecs/acl/ in the job's Nomad Variable and set
      # tokens_from_variable (terraform/ does both):
      #
      #   nomad var put nomad/jobs/gpushare-quota nomad_token=... consul_token=...
      dynamic "template" {
        for_each = var.tokens_from_variable ? ["tokens"] : []
        content {
          destination = "secrets/tokens.env"
          env         = true
          change_mode = "restart"
          data        = <<-EOT
          {{ with nomadVar "nomad/jobs/gpushare-quota" -}}
          NOMAD_TOKEN={{ .nomad_token }}
          CONSUL_HTTP_TOKEN={{ .consul_token }}
          {{ end -}}
          EOT
        }
      }

      resources {
        cpu    = var.cpu_mhz
        memory = var.memory_mb
      }
    }
  }
}
