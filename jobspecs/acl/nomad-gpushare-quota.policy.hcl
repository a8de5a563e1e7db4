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
#
# The service never stops a job it could not register again: before a job
# may be suspended, it evaluates this token's own policies the way Nomad's
# register endpoint does (submit-job in the job's namespace, host volumes,
# CSI volumes). A job this token could not bring back is never a victim;
# /v1/status says why under "warnings". The host_volume and plugin blocks
# below (with csi-mount-volume in the project block) let it resume GPU jobs
# that mount volumes. They are the trade-off: the token can register a job
# that mounts any host volume read-write in a project namespace, although
# it only ever registers the owner's own spec of a job it suspended.
# Narrow `host_volume "*"` to the volumes your GPU jobs use (jobs mounting
# other volumes are then never suspended), or drop both blocks to keep
# every job with volumes out of suspension.
namespace "*" {
  capabilities = [
    # GET /v1/jobs?namespace=*&meta=true (jobs, their meta and summaries)
    "list-jobs",
    # GET /v1/job/:id and /v1/job/:id/summary (specs of running, pending
    # and suspended jobs; system jobs' queued instances),
    # GET /v1/allocations?namespace=*&resources=true (who holds which GPU),
    # GET /v1/event/stream topics Job, Allocation, Evaluation, Deployment:
    # a wildcard stream needs read-job in every namespace, or Nomad refuses
    # it (403) and the service lists Nomad in full every cycle instead
    "read-job",
  ]
}

# The keys that sign the service's suspension records and prove its
# version tags (docs/design.md, Who may steer the service): the Nomad
# Variable gpushare/record-key, which the service creates with a new key
# when it is absent. A namespace block that names "default" replaces the
# "*" block there, so it repeats the read capabilities. Keep the
# variable where only operators may read it: a token with write on the
# default namespace reads every variable there. To keep the keys
# elsewhere, run the service with -record-key-namespace and
# -record-key-var (and move this block), or give it -record-key-file.
#
# gpushare/demand/*: the demand the leader publishes for each GPU node
# (-publish-demand, on by default; -demand-var): a heartbeat
# gpushare/demand/leader and gpushare/demand/nodes/<node ID>, which the
# device plugins read (docs/design.md, Partition protocol, "Published
# demand"). list: a new leader lists the node variables an earlier one
# left; destroy: it deletes those of nodes gone, and its heartbeat when it
# stops leading. Only the service may write there: a plugin trusts it for
# speed only, never for safety.
namespace "default" {
  capabilities = ["list-jobs", "read-job"]
  variables {
    path "gpushare/record-key" {
      capabilities = ["read", "write"]
    }
    path "gpushare/demand/*" {
      capabilities = ["read", "write", "list", "destroy"]
    }
  }
}

# read: GET /v1/nodes and /v1/node/:id (each node's GPUs in both device
# families), the Node topic of the event stream, GET /v1/client/metadata.
# write: POST /v1/client/metadata, the placement ranks the service publishes
# as dynamic node metadata gpushare.rank.<class> (-publish-ranks, on by
# default; docs/design.md, Placement ranking). Nomad has no narrower
# capability for node metadata: node write also lets the token drain nodes
# and change their eligibility, which the service never does. Run the
# service with -publish-ranks=false and set "read" here to keep the token
# read-only on nodes (GPU jobs' ranking affinities then match no node and
# Nomad places them by its own scoring alone).
node {
  policy = "write"
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
