output "quota_keys" {
  description = "Consul key of each project's quota document."
  value       = { for name, q in gpushare_quota.project : name => q.key }
}

output "namespaces" {
  description = "The projects' Nomad namespaces."
  value       = sort(tolist(local.namespaces))
}

output "plugin_nomad_token" {
  description = "Secret of the device plugin's Nomad token: put it in each GPU client's plugin config (nomad_token) or the client's NOMAD_TOKEN."
  value       = var.acl ? nomad_acl_token.plugin[0].secret_id : null
  sensitive   = true
}

output "quota_service_job" {
  description = "ID of the quota service job."
  value       = nomad_job.quota_service.id
}

output "plugin_demand_var" {
  description = "Where the quota service publishes each GPU node's demand: put it in each GPU client's plugin config (demand_var) when it is not the default gpushare/demand."
  value       = local.demand_var
}
