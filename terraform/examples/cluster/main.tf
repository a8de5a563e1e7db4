# A complete gpushare cluster on existing Nomad and Consul with ACLs on.
# terraform/README.md shows how to install the providers and run it.

terraform {
  required_providers {
    nomad = {
      source  = "hashicorp/nomad"
      version = "1.4.20"
    }
    gpushare = {
      source = "gpushare/gpushare"
    }
  }
}

variable "nomad_addr" {
  type    = string
  default = "http://127.0.0.1:4646"
}

variable "consul_addr" {
  type    = string
  default = "127.0.0.1:8500"
}

# Management tokens (or tokens allowed to manage ACLs, namespaces, the
# scheduler configuration, jobs, variables and the quotas' KV folder).
variable "nomad_token" {
  type      = string
  sensitive = true
}

variable "consul_token" {
  type      = string
  sensitive = true
}

variable "quota_binary" {
  type    = string
  default = "/usr/local/bin/gpushare-quota"
}

variable "projects" {
  type = map(object({
    guaranteed        = number
    limit             = optional(number)
    priority          = optional(number)
    over_quota_weight = optional(number)
    namespace         = optional(string)
    job_meta_key      = optional(string)
  }))
  default = {
    team-a = { guaranteed = 2, priority = 10 }
    team-b = { guaranteed = 2, limit = 4 }
  }
}

provider "nomad" {
  address   = var.nomad_addr
  secret_id = var.nomad_token
}

provider "gpushare" {
  consul_address = var.consul_addr
  consul_token   = var.consul_token
  nomad_address  = var.nomad_addr
  nomad_token    = var.nomad_token
}

module "gpushare" {
  source = "../../modules/gpushare"

  projects = var.projects
  quota_service = {
    binary      = var.quota_binary
    nomad_addr  = var.nomad_addr
    consul_addr = var.consul_addr
  }
}

output "plugin_nomad_token" {
  value     = module.gpushare.plugin_nomad_token
  sensitive = true
}

output "quota_keys" {
  value = module.gpushare.quota_keys
}
