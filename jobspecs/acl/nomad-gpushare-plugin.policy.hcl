# Nomad ACL policy for the gpushare device plugin on every GPU client:
# read-only, but for stopping the allocation of a guest that the node-level
# scheduler moves back to its home GPU (alloc-lifecycle).
#
#   nomad acl policy apply -description "gpushare device plugin" \
#     gpushare-plugin jobspecs/acl/nomad-gpushare-plugin.policy.hcl
#   nomad acl token create -name gpushare-plugin -policy gpushare-plugin
#
# Give the secret to the plugin as `nomad_token` in its config block of the
# client configuration, or as NOMAD_TOKEN in the Nomad client's environment
# (Nomad keeps NOMAD_TOKEN from tasks).
#
# The plugin finds its node by the local agent's node ID when the token may
# read the agent (add `agent { policy = "read" }`), else by a node named
# like the host, else by node_id or node_name in its config.
#
# The plugin must see EVERY allocation on its node: Nomad silently leaves
# out of a token's lists the allocations of namespaces it cannot read, and a
# GPU held by one of them would look idle. So on every read the plugin
# checks its own token (/v1/acl/token/self, /v1/acl/policy/self and the
# rules of its policies, which any token may read for itself); unless they
# grant read-job in every namespace (a namespace "*" rule, and no rule that
# takes read-job away from a namespace), it switches no GPU between the
# whole and shared families, refuses reservations outside the family a GPU
# is offered in, and logs what the token lacks. Do not narrow "*" to a list
# of namespaces.

# GET /v1/node/:id (the servers' view of this node's GPUs),
# GET /v1/node/:id/allocations (which GPUs live allocations hold).
node {
  policy = "read"
}

# Allocations of a namespace the token cannot read are left out of the
# node's list, so every namespace: read-job. It also reads waiting demand:
# GET /v1/evaluations?status=blocked&namespace=* and GET /v1/job/:id of
# the blocked jobs (their device requests). alloc-lifecycle: POST
# /v1/allocation/:id/stop, to move a guest (a burstable share task running
# on an idle GPU) when Nomad binds that GPU whole; without it the whole
# task waits guest_move_timeout and fails (spread = false avoids guests).
namespace "*" {
  capabilities = ["read-job", "alloc-lifecycle"]
}

# The demand the quota service's leader publishes for this node (Nomad
# Variables gpushare/demand/leader and gpushare/demand/nodes/<node ID>,
# the plugin's demand_var; docs/design.md, Partition protocol, "Published
# demand"): read only. While it is fresh the plugin lists no blocked
# evaluations. Without this block the plugin reads Nomad itself, as
# before. A block naming "default" replaces the "*" block there, so it
# repeats its capabilities: the plugin must still read every job there.
namespace "default" {
  capabilities = ["read-job", "alloc-lifecycle"]
  variables {
    path "gpushare/demand/*" {
      capabilities = ["read"]
    }
  }
}
