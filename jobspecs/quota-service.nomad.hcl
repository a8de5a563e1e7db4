# The gpushare quota service: two instances; a Consul lock makes one of them
# act, the other takes over within seconds. Each serves the HTTP status API,
# the dashboard and Prometheus metrics on a dynamic port of its node's
# address (Consul's health check and people reach it there), registered in
# Consul as "gpushare-quota". With Nomad's ACLs on, the status and the
# dashboard ask for a Nomad token and show the namespaces it can read;
# /v1/health and /metrics answer without one.
#
#   nomad job run -var binary=/usr/local/bin/gpushare-quota jobspecs/quota-service.nomad.hcl

variable "binary" {
  description = "Path of the gpushare-quota binary on the client nodes."
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
# service at 5,000 GPU nodes and 100,000 allocations peaks at 478-487 MiB
# with memory_mb = 512 (1,053 MiB without a memory limit), and a busy
# cluster (50 events/s) keeps it at 135-138% of one core there. The
# defaults fit 5,000 nodes with room for the garbage collector; give such a
# cluster cpu_mhz = 3000.
variable "memory_mb" {
  description = "Memory reserved for each instance, in MiB (512 fits 5,000 GPU nodes; see above)."
  type        = number
  default     = 1024
}

variable "cpu_mhz" {
  description = "CPU reserved for each instance, in MHz."
  type        = number
  default     = 1000
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
      driver = "raw_exec"

      config {
        command = var.binary
        args = [
          "-listen", "${NOMAD_ADDR_http}",
          "-instance", "${NOMAD_ALLOC_ID}",
        ]
      }

      # NOMAD_CACERT, CONSUL_CACERT and the other TLS variables of the
      # Nomad and Consul clients are read here too: add them to this block
      # when the agents serve HTTPS.
      env {
        NOMAD_ADDR             = var.nomad_addr
        CONSUL_HTTP_ADDR       = var.consul_addr
        GPUSHARE_KV_PREFIX     = var.kv_prefix
        GPUSHARE_TLS_CERT      = var.tls_cert
        GPUSHARE_TLS_KEY       = var.tls_key
        GPUSHARE_USAGE_PORT    = var.usage_port
        GPUSHARE_PUBLISH_RANKS = var.publish_ranks ? "true" : "false"
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
