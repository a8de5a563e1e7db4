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
#
# The service never stops a job it could not register again: before a job
# may be suspended, it evaluates this token's own policies the way Nomad's
# register endpoint does (namespace, host volumes, CSI volumes). A job this
# token could not bring back is never a victim; /v1/status says why under
# "warnings". The volume rights below let it resume GPU jobs that mount
# volumes. They are the trade-off: the token can register a job that mounts
# any host volume read-write, although it only ever registers the owner's
# own spec of a job it suspended. Narrow `host_volume "*"` to the volumes
# your GPU jobs use (jobs mounting other volumes are then never suspended),
# or drop the host_volume and plugin blocks and csi-mount-volume to keep
# every job with volumes out of suspension.
namespace "*" {
  capabilities = [
    # GET /v1/jobs?namespace=*&meta=true (jobs, their meta and summaries),
    "list-jobs",
    # GET /v1/job/:id and /v1/job/:id/versions (specs of running, pending
    # and suspended jobs; the suspended version to register again),
    # GET /v1/allocations?namespace=*&resources=true (who holds which GPU),
    # GET /v1/event/stream topics Job, Allocation, Evaluation
    "read-job",
    # DELETE /v1/job/:id without purge (suspend),
    # PUT /v1/job/:id/versions/:tag/tag and DELETE of it (tag the stopped
    # version so that Nomad's garbage collector keeps it and its owner
    # sees why; untag after the resume),
    # POST /v1/job/:id with Stop=false and EnforceIndex (resume),
    # POST /v1/job/:id/evaluate (re-evaluate work it made room for)
    "submit-job",
    # Resume of jobs with CSI volumes (Nomad checks it on register).
    "csi-mount-volume",
  ]
}

# Resume of jobs with host volumes: Nomad's register checks mount-readwrite
# (or mount-readonly for read-only volumes) on each volume's source.
host_volume "*" {
  policy = "write"
}

# Resume of jobs with CSI volumes also needs plugin read.
plugin {
  policy = "read"
}

# GET /v1/nodes?resources=true (each node's GPUs in both device families)
# and the Node topic of the event stream.
node {
  policy = "read"
}
