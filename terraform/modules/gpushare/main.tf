# A gpushare cluster on existing Nomad and Consul: the projects' quotas and
# namespaces, their departments, Nomad's scheduler configuration, the ACL policies and tokens
# of the quota service and the device plugin (from jobspecs/acl), and the
# quota service job (jobspecs/quota-service.nomad.hcl).

locals {
  jobspecs = "${path.module}/../../../jobspecs"

  # Every name the module gives: empty var.name keeps the plain names
  # (gpushare-quota, ...); "blue" makes blue-gpushare-quota, ... so that a
  # second install lives beside the first.
  prefix   = var.name == "" ? "" : "${var.name}-"
  job_id   = "${local.prefix}gpushare-quota"
  kv_root  = coalesce(var.kv_prefix, "${local.prefix}gpushare")
  instance = var.name == "" ? "" : " (${var.name})"

  # The job file names its job, its Consul service and its tokens'
  # variable gpushare-quota; the install's names replace them.
  quota_jobspec = replace(replace(file("${local.jobspecs}/quota-service.nomad.hcl"),
    "\"gpushare-quota\"", "\"${local.job_id}\""),
  "\"nomad/jobs/gpushare-quota\"", "\"nomad/jobs/${local.job_id}\"")

  namespaces = toset([for name, p in var.projects : coalesce(p.namespace, name)])

  # Each install keeps its record keys in a variable of its own.
  record_key_var = "${local.kv_root}/record-key"
  # and publishes its node demand under a prefix of its own (the plugins'
  # demand_var must name it).
  demand_var = "${local.kv_root}/demand"

  # The service reads everywhere and suspends and resumes work only in the
  # project namespaces.
  quota_nomad_rules = join("\n", concat(
    [replace(replace(file("${local.jobspecs}/acl/nomad-gpushare-quota.policy.hcl"), "\"gpushare/record-key\"", "\"${local.record_key_var}\""),
    "\"gpushare/demand/*\"", "\"${local.demand_var}/*\"")],
    [for ns in sort(tolist(local.namespaces)) :
    replace(file("${local.jobspecs}/acl/nomad-gpushare-quota-project.policy.hcl"), "<namespace>", ns)],
  ))
  quota_consul_rules = replace(file("${local.jobspecs}/acl/consul-gpushare-quota.policy.hcl"),
  "\"gpushare/", "\"${local.kv_root}/")
}

resource "gpushare_department" "this" {
  for_each = var.departments

  name              = each.key
  guaranteed        = each.value.guaranteed
  limit             = each.value.limit
  priority          = each.value.priority
  over_quota_weight = each.value.over_quota_weight

  lifecycle {
    postcondition {
      condition     = startswith(self.key, "${local.kv_root}/departments/")
      error_message = "The department went to ${self.key}, but this install's quota service reads ${local.kv_root}/departments/: set kv_prefix = \"${local.kv_root}\" in the gpushare provider's configuration."
    }
  }
}

resource "gpushare_quota" "project" {
  for_each = var.projects

  project           = each.key
  guaranteed        = each.value.guaranteed
  limit             = each.value.limit
  priority          = each.value.priority
  over_quota_weight = each.value.over_quota_weight
  min_runtime       = each.value.min_runtime
  department        = each.value.department
  namespace         = each.value.namespace
  job_meta_key      = each.value.job_meta_key

  # Departments are written before their projects and deleted after them:
  # the service does not take a project naming a department it does not
  # know.
  depends_on = [gpushare_department.this]

  lifecycle {
    precondition {
      condition     = each.value.department == null || contains(keys(var.departments), coalesce(each.value.department, "-"))
      error_message = "Project ${each.key} names department ${coalesce(each.value.department, "-")}, which is not in departments: add it there, or remove the project's department."
    }
    postcondition {
      condition     = startswith(self.key, "${local.kv_root}/quotas/")
      error_message = "The quota went to ${self.key}, but this install's quota service reads ${local.kv_root}/quotas/: set kv_prefix = \"${local.kv_root}\" in the gpushare provider's configuration."
    }
  }
}

# A namespace that exists already is another owner's (another install,
# or people) unless its description is this install's: the module never
# takes it over, so destroy never deletes it.
data "nomad_namespaces" "existing" {
  count = var.create_namespaces ? 1 : 0
}

locals {
  namespace_description = "gpushare project namespace${local.instance}"
  wanted_namespaces     = var.create_namespaces ? setsubtract(local.namespaces, ["default"]) : toset([])
  existing_namespaces   = var.create_namespaces ? toset(data.nomad_namespaces.existing[0].namespaces) : toset([])
}

data "nomad_namespace" "existing" {
  for_each = setintersection(local.wanted_namespaces, local.existing_namespaces)

  name = each.key
}

resource "nomad_namespace" "project" {
  for_each = toset([for ns in local.wanted_namespaces : ns
    if !contains(local.existing_namespaces, ns) || data.nomad_namespace.existing[ns].description == local.namespace_description
  ])

  name        = each.key
  description = local.namespace_description
}

# Nomad's own preemption knows job priorities only: it would stop work of
# a project within its guarantee, with no record and no resume. The quota
# service does the preempting for batch and service jobs.
resource "nomad_scheduler_config" "this" {
  count = coalesce(var.manage_scheduler_config, var.name == "") ? 1 : 0

  scheduler_algorithm             = "binpack"
  memory_oversubscription_enabled = false
  preemption_config = {
    system_scheduler_enabled   = true
    sysbatch_scheduler_enabled = false
    batch_scheduler_enabled    = false
    service_scheduler_enabled  = false
  }
}

# Nomad's policy write is an upsert: a policy of the same name that this
# install did not make (its description differs) would be taken over,
# then deleted by destroy. The plan refuses instead.
data "nomad_acl_policies" "existing" {
  count = var.acl ? 1 : 0

  prefix = "${local.prefix}gpushare-"
}

locals {
  existing_policies = var.acl ? { for p in data.nomad_acl_policies.existing[0].policies : p.name => p.description } : {}
  policies = {
    plugin = { name = "${local.prefix}gpushare-plugin", description = "gpushare device plugin${local.instance} (jobspecs/acl/nomad-gpushare-plugin.policy.hcl)" }
    quota  = { name = local.job_id, description = "gpushare quota service${local.instance} (jobspecs/acl/nomad-gpushare-quota*.policy.hcl)" }
  }
  foreign_policy_fix = "was not made by this install: install beside it with the module's name variable, or delete it first"
}

resource "nomad_acl_policy" "plugin" {
  count = var.acl ? 1 : 0

  name        = local.policies.plugin.name
  description = local.policies.plugin.description
  rules_hcl   = replace(file("${local.jobspecs}/acl/nomad-gpushare-plugin.policy.hcl"), "\"gpushare/demand/*\"", "\"${local.demand_var}/*\"")

  lifecycle {
    precondition {
      condition     = lookup(local.existing_policies, local.policies.plugin.name, local.policies.plugin.description) == local.policies.plugin.description
      error_message = "The Nomad ACL policy ${local.policies.plugin.name} ${local.foreign_policy_fix}."
    }
  }
}

resource "nomad_acl_token" "plugin" {
  count = var.acl ? 1 : 0

  name     = "${local.prefix}gpushare-plugin"
  type     = "client"
  policies = [nomad_acl_policy.plugin[0].name]
}

resource "nomad_acl_policy" "quota" {
  count = var.acl ? 1 : 0

  name        = local.policies.quota.name
  description = local.policies.quota.description
  rules_hcl   = local.quota_nomad_rules

  lifecycle {
    precondition {
      condition     = lookup(local.existing_policies, local.policies.quota.name, local.policies.quota.description) == local.policies.quota.description
      error_message = "The Nomad ACL policy ${local.policies.quota.name} ${local.foreign_policy_fix}."
    }
  }
}

resource "nomad_acl_token" "quota" {
  count = var.acl ? 1 : 0

  name     = local.job_id
  type     = "client"
  policies = [nomad_acl_policy.quota[0].name]
}

resource "gpushare_consul_acl_policy" "quota" {
  count = var.acl ? 1 : 0

  name        = local.job_id
  description = "gpushare quota service${local.instance} (jobspecs/acl/consul-gpushare-quota.policy.hcl)"
  rules       = local.quota_consul_rules
}

resource "gpushare_consul_acl_token" "quota" {
  count = var.acl ? 1 : 0

  description = "gpushare quota service${local.instance}"
  policies    = [gpushare_consul_acl_policy.quota[0].name]
}

# Only the job's own tasks can read nomad/jobs/<job>.
resource "gpushare_nomad_variable" "quota_tokens" {
  count = var.acl ? 1 : 0

  path = "nomad/jobs/${local.job_id}"
  items = {
    nomad_token  = nomad_acl_token.quota[0].secret_id
    consul_token = gpushare_consul_acl_token.quota[0].secret_id
  }
}

resource "nomad_job" "quota_service" {
  jobspec          = local.quota_jobspec
  purge_on_destroy = true

  hcl2 {
    enabled = true
    vars = {
      driver               = var.quota_service.driver
      artifact_url         = var.quota_service.artifact_url
      artifact_checksum    = var.quota_service.artifact_checksum
      binary               = var.quota_service.binary
      nomad_addr           = var.quota_service.nomad_addr
      consul_addr          = var.quota_service.consul_addr
      tls_cert             = var.quota_service.tls_cert
      tls_key              = var.quota_service.tls_key
      memory_mb            = tostring(var.quota_service.memory_mb)
      cpu_mhz              = tostring(var.quota_service.cpu_mhz)
      publish_ranks        = tostring(var.quota_service.publish_ranks)
      kv_prefix            = local.kv_root
      record_key_var       = local.record_key_var
      demand_var           = local.demand_var
      tokens_from_variable = tostring(var.acl)
    }
  }

  lifecycle {
    precondition {
      condition     = strcontains(local.quota_jobspec, "job \"${local.job_id}\"")
      error_message = "jobspecs/quota-service.nomad.hcl no longer names its job \"gpushare-quota\": update the module's replace of the job's names."
    }
  }

  # The service starts with its tokens in place and the quotas written.
  depends_on = [gpushare_nomad_variable.quota_tokens, gpushare_department.this, gpushare_quota.project, nomad_namespace.project]
}
