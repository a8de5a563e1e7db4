variable "name" {
  description = "Name of this install, prefixed to everything the module names (\"blue\": the job, its Consul service and its Nomad Variable blue-gpushare-quota, the policies and tokens blue-gpushare-plugin and blue-gpushare-quota, the Consul keys under blue-gpushare/), so that it lives beside another install. Empty: the plain names."
  type        = string
  default     = ""
  validation {
    condition     = can(regex("^([a-z0-9][a-z0-9-]{0,30})?$", var.name))
    error_message = "The name must be empty or up to 31 lowercase letters, digits and dashes, starting with a letter or digit."
  }
}

variable "projects" {
  description = "Projects by name: their quota (guaranteed GPUs, optional limit, priority, over_quota_weight, min_runtime), their department (a key of departments; default none) and where their jobs are (namespace, default the project name; job_meta_key). A namespace is created for each project unless it is \"default\" or create_namespaces is false."
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
}

variable "departments" {
  description = "Departments by name: projects grouped one level up (a project joins one with its department attribute). Each has a guarantee its projects' guarantees fit within, and optionally a limit, priority and over_quota_weight, as a project has. One level only: departments do not nest."
  type = map(object({
    guaranteed        = number
    limit             = optional(number)
    priority          = optional(number)
    over_quota_weight = optional(number)
  }))
  default = {}
}

variable "create_namespaces" {
  description = "Create a Nomad namespace for each project."
  type        = bool
  default     = true
}

variable "acl" {
  description = "Nomad and Consul run with ACLs on: create the ACL policies and tokens of the quota service and the device plugin, and give the service its tokens through its Nomad Variable."
  type        = bool
  default     = true
}

variable "manage_scheduler_config" {
  description = "Set Nomad's scheduler configuration to what the quota service expects (Nomad's own preemption off for batch and service jobs). This resource owns the cluster-wide setting, so one install should hold it. Default: true for the install without a name, false for a named one."
  type        = bool
  default     = null
}

variable "kv_prefix" {
  description = "Root of the quota service's Consul keys (the gpushare provider's kv_prefix must be the same). Default: gpushare, or <name>-gpushare for a named install."
  type        = string
  default     = null
}

variable "quota_service" {
  description = "The quota service job: its task driver (exec, or raw_exec where exec cannot run), where its binary comes from (the release archive's URL and sha256 checksum, fetched by Nomad; else the path of the gpushare-quota binary on the clients), the Nomad and Consul HTTP addresses it uses from there, (both or neither) the paths on the clients of a PEM certificate and key to serve its API over HTTPS, each instance's memory and CPU, and whether it publishes placement ranks."
  type = object({
    # exec needs the Nomad client running as root; raw_exec must be
    # enabled on the clients (jobspecs/quota-service.nomad.hcl).
    driver = optional(string, "exec")
    # The release archive gpushare-quota_<version>_linux_<arch>.tar.gz and
    # its line in SHA256SUMS as sha256:<hex>; empty: binary on the clients.
    artifact_url      = optional(string, "")
    artifact_checksum = optional(string, "")
    binary            = optional(string, "/usr/local/bin/gpushare-quota")
    nomad_addr        = optional(string, "http://127.0.0.1:4646")
    consul_addr       = optional(string, "127.0.0.1:8500")
    tls_cert          = optional(string, "")
    tls_key           = optional(string, "")
    # Resources of each instance: 1024 MiB fits 5,000 GPU nodes; give
    # 3000 MHz at that size (docs/scale.md).
    memory_mb = optional(number, 1024)
    cpu_mhz   = optional(number, 1000)
    # Placement ranks as node metadata (docs/design.md, Placement ranking).
    publish_ranks = optional(bool, true)
  })
  validation {
    condition     = contains(["exec", "raw_exec"], var.quota_service.driver)
    error_message = "quota_service.driver must be exec or raw_exec."
  }
  validation {
    condition     = var.quota_service.artifact_url == "" || can(regex("^sha256:[0-9a-f]{64}$", var.quota_service.artifact_checksum))
    error_message = "quota_service.artifact_url needs quota_service.artifact_checksum: sha256:<hex>, the archive's line in SHA256SUMS."
  }
  validation {
    condition     = (var.quota_service.tls_cert == "") == (var.quota_service.tls_key == "")
    error_message = "quota_service.tls_cert and quota_service.tls_key go together: set both to serve HTTPS, or neither."
  }
  default = {}
}
