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

# Name of this install: empty for the plain names; another name installs
# beside an existing gpushare (its own job, policies, tokens and Consul
# keys under <name>-gpushare/).
variable "name" {
  type    = string
  default = ""
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

# Where the quota service's binary comes from: the release archive
# (make dist) at quota_artifact_url with its sha256:<hex> checksum from
# SHA256SUMS, else quota_binary on the clients.
variable "quota_artifact_url" {
  type    = string
  default = ""
}

variable "quota_artifact_checksum" {
  type    = string
  default = ""
}

variable "quota_binary" {
  type    = string
  default = "/usr/local/bin/gpushare-quota"
}

# exec (the Nomad clients run as root) or raw_exec (enabled on the clients).
variable "quota_driver" {
  type    = string
  default = "exec"
}

variable "projects" {
  type = map(object({
    guaranteed        = number
    limit             = optional(number)
    priority          = optional(number)
    over_quota_weight = optional(number)
    min_runtime       = optional(string)
    department        = optional(string)
    namespace         = optional(string)
    job_meta_key      = optional(string)
  }))
  default = {
    team-a = { guaranteed = 2, priority = 10 }
    team-b = { guaranteed = 2, limit = 4 }
  }
}

# Departments group projects one level up (a project's department names
# one); none by default.
variable "departments" {
  type = map(object({
    guaranteed        = number
    limit             = optional(number)
    priority          = optional(number)
    over_quota_weight = optional(number)
  }))
  default = {}
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
  # The module's kv_prefix: the quotas go where this install's service
  # reads them.
  kv_prefix = var.name == "" ? "gpushare" : "${var.name}-gpushare"
}

module "gpushare" {
  source = "../../modules/gpushare"

  name        = var.name
  projects    = var.projects
  departments = var.departments
  quota_service = {
    driver            = var.quota_driver
    artifact_url      = var.quota_artifact_url
    artifact_checksum = var.quota_artifact_checksum
    binary            = var.quota_binary
    nomad_addr        = var.nomad_addr
    consul_addr       = var.consul_addr
  }
}

output "plugin_nomad_token" {
  value     = module.gpushare.plugin_nomad_token
  sensitive = true
}

output "quota_keys" {
  value = module.gpushare.quota_keys
}
