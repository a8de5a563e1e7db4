# The gpushare quota service's rights in one project namespace, appended to
# nomad-gpushare-quota.policy.hcl once per project namespace with the name
# in place of the placeholder on the namespace line below.
#
# Work in a namespace without this block is watched but never suspended
# for another project: a namespace whose GPU jobs may be reclaimed (one
# without a quota document counts as a project guaranteed nothing) needs
# it too.
namespace "<namespace>" {
  capabilities = [
    "list-jobs",
    # GET /v1/job/:id/versions (the suspended version to register again)
    "read-job",
    # DELETE /v1/job/:id without purge (suspend),
    # PUT /v1/job/:id/versions/:tag/tag and DELETE of it (tag the stopped
    # version, so that Nomad's garbage collector keeps it and its owner
    # sees why; untag after the resume),
    # POST /v1/job/:id with Stop=false and EnforceIndex (resume),
    # POST /v1/job/:id/evaluate (re-evaluate work it made room for),
    # POST /v1/job/:id/scale with the job modify index (shrink and grow
    # elastic groups; Nomad accepts submit-job for it)
    "submit-job",
    # Resume of jobs with CSI volumes (Nomad checks it on register).
    "csi-mount-volume",
  ]
}
