# A gpushare cluster on existing Nomad and Consul: the projects' quotas and
# namespaces, Nomad's scheduler configuration, the ACL policies and tokens
# of the quota service and the device plugin (from jobspecs/acl), and the
# quota service job (jobspecs/quota-service.nomad.hcl).

locals {
  jobspecs = "${path.module}/../../../jobspecs"

  namespaces = toset([for name, p in var.projects : coalesce(p.namespace, name)])

  # The service reads everywhere and suspends and resumes work only in the
  # project namespaces.
  quota_nomad_rules = join("\n", concat(
    [file("${local.jobspecs}/acl/nomad-gpushare-quota.policy.hcl")],
    [for ns in sort(tolist(local.namespaces)) :
    replace(file("${local.jobspecs}/acl/nomad-gpushare-quota-project.policy.hcl"), "<namespace>", ns)],
  ))
  quota_consul_rules = replace(file("${local.jobspecs}/acl/consul-gpushare-quota.policy.hcl"),
  "\"gpushare/", "\"${var.kv_prefix}/")
}

resource "gpushare_quota" "project" {
  for_each = var.projects

  project           = each.key
  guaranteed        = each.value.guaranteed
  limit             = each.value.limit
  priority          = each.value.priority
  over_quota_weight = each.value.over_quota_weight
  namespace         = each.value.namespace
  job_meta_key      = each.value.job_meta_key
}

resource "nomad_namespace" "project" {
  for_each = var.create_namespaces ? setsubtract(local.namespaces, ["default"]) : toset([])

  name        = each.key
  description = "gpushare project namespace"
}

# Nomad's own preemption knows job priorities only: it would stop work of
# a project within its guarantee, with no record and no resume. The quota
# service does the preempting for batch and service jobs.
resource "nomad_scheduler_config" "this" {
  count = var.manage_scheduler_config ? 1 : 0

  scheduler_algorithm             = "binpack"
  memory_oversubscription_enabled = false
  preemption_config = {
    system_scheduler_enabled   = true
    sysbatch_scheduler_enabled = false
    batch_scheduler_enabled    = false
    service_scheduler_enabled  = false
  }
}

resource "nomad_acl_policy" "plugin" {
  count = var.acl ? 1 : 0

  name        = "gpushare-plugin"
  description = "gpushare device plugin (jobspecs/acl/nomad-gpushare-plugin.policy.hcl)"
  rules_hcl   = file("${local.jobspecs}/acl/nomad-gpushare-plugin.policy.hcl")
}

resource "nomad_acl_token" "plugin" {
  count = var.acl ? 1 : 0

  name     = "gpushare-plugin"
  type     = "client"
  policies = [nomad_acl_policy.plugin[0].name]
}

resource "nomad_acl_policy" "quota" {
  count = var.acl ? 1 : 0

  name        = "gpushare-quota"
  description = "gpushare quota service (jobspecs/acl/nomad-gpushare-quota*.policy.hcl)"
  rules_hcl   = local.quota_nomad_rules
}

resource "nomad_acl_token" "quota" {
  count = var.acl ? 1 : 0

  name     = "gpushare-quota"
  type     = "client"
  policies = [nomad_acl_policy.quota[0].name]
}

resource "gpushare_consul_acl_policy" "quota" {
  count = var.acl ? 1 : 0

  name        = "gpushare-quota"
  description = "gpushare quota service (jobspecs/acl/consul-gpushare-quota.policy.hcl)"
  rules       = local.quota_consul_rules
}

resource "gpushare_consul_acl_token" "quota" {
  count = var.acl ? 1 : 0

  description = "gpushare quota service"
  policies    = [gpushare_consul_acl_policy.quota[0].name]
}

# Only the job's own tasks can read nomad/jobs/<job>.
resource "gpushare_nomad_variable" "quota_tokens" {
  count = var.acl ? 1 : 0

  path = "nomad/jobs/gpushare-quota"
  items = {
    nomad_token  = nomad_acl_token.quota[0].secret_id
    consul_token = gpushare_consul_acl_token.quota[0].secret_id
  }
}

resource "nomad_job" "quota_service" {
  jobspec          = file("${local.jobspecs}/quota-service.nomad.hcl")
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
      kv_prefix            = var.kv_prefix
      tokens_from_variable = tostring(var.acl)
    }
  }

  # The service starts with its tokens in place and the quotas written.
  depends_on = [gpushare_nomad_variable.quota_tokens, gpushare_quota.project, nomad_namespace.project]
}
