# Nomad ACL policy for the gpushare quota service: what it reads in every
# namespace. It acts (suspends and resumes) only in project namespaces:
# add nomad-gpushare-quota-project.policy.hcl once per project namespace,
# with <namespace> replaced, to the same policy (terraform/ does this from
# the quotas), for example:
#
#   { cat jobspecs/acl/nomad-gpushare-quota.policy.hcl
#     for ns in team-a team-b; do
#       sed "s/<namespace>/$ns/" jobspecs/acl/nomad-gpushare-quota-project.policy.hcl
#     done; } >gpushare-quota.hcl
#   nomad acl policy apply -description "gpushare quota service" gpushare-quota gpushare-quota.hcl
#   nomad acl token create -name gpushare-quota -policy gpushare-quota
#
# Give the token's secret to the service as NOMAD_TOKEN.
namespace "*" {
  capabilities = [
    # GET /v1/jobs?namespace=*  (jobs with their summaries: queued work)
    "list-jobs",
    # GET /v1/job/:id (specs of queued and suspended jobs),
    # GET /v1/allocations?namespace=*&resources=true (who holds which GPU),
    # GET /v1/event/stream topics Job, Allocation, Evaluation
    "read-job",
  ]
}

# GET /v1/nodes?resources=true (each node's GPUs in both device families)
# and the Node topic of the event stream.
node {
  policy = "read"
}
