# Nomad ACL policy for the gpushare quota service: exactly what it calls.
#
#   nomad acl policy apply -description "gpushare quota service" \
#     gpushare-quota jobspecs/acl/nomad-gpushare-quota.policy.hcl
#   nomad acl token create -name gpushare-quota -policy gpushare-quota
#
# Give the token's secret to the service as NOMAD_TOKEN.
#
# Projects map to namespaces (and may claim jobs of any namespace through a
# job meta key), so the service needs the same rights in every namespace.
# Restrict "*" to your project namespaces if they are fixed.
namespace "*" {
  capabilities = [
    # GET /v1/jobs?namespace=*  (jobs with their summaries: queued work)
    "list-jobs",
    # GET /v1/job/:id (specs of queued and suspended jobs),
    # GET /v1/allocations?namespace=*&resources=true (who holds which GPU),
    # GET /v1/event/stream topics Job, Allocation, Evaluation
    "read-job",
    # DELETE /v1/job/:id without purge (suspend),
    # POST /v1/job/:id with Stop=false and EnforceIndex (resume),
    # POST /v1/job/:id/evaluate (re-evaluate work it made room for)
    "submit-job",
  ]
}

# GET /v1/nodes?resources=true (each node's GPUs in both device families)
# and the Node topic of the event stream.
node {
  policy = "read"
}
