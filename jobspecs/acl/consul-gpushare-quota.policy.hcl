# Consul ACL policy for the gpushare quota service, with the default KV
# prefix "gpushare" (-kv-prefix / GPUSHARE_KV_PREFIX); change the prefix
# below if you change it there.
#
#   consul acl policy create -name gpushare-quota \
#     -rules @jobspecs/acl/consul-gpushare-quota.policy.hcl
#   consul acl token create -description "gpushare quota service" -policy-name gpushare-quota
#
# Give the token's secret to the service as CONSUL_HTTP_TOKEN.

# gpushare/quotas/*       read (quota documents, written by people)
# gpushare/status/*       write (project status, quota errors)
# gpushare/suspended/*    write (the record written before every stop)
# gpushare/history/*      write (bounded history)
# gpushare/leader         write (the leader lock; KV acquire/release)
key_prefix "gpushare/" {
  policy = "write"
}

# The leader lock is a Consul session: create, renew and destroy it. The
# session is bound to the local agent's node, whose name is not known in
# advance; narrow "" to your nodes' name prefix if they share one.
session_prefix "" {
  policy = "write"
}

# Sessions carry the node's serfHealth check: reading the node is needed.
node_prefix "" {
  policy = "read"
}

# The Nomad job registers the instances as the Consul service
# "gpushare-quota" (jobspecs/quota-service.nomad.hcl). Nomad registers it
# with its own Consul token; grant this to that token (or to this one if
# the service registers itself).
service "gpushare-quota" {
  policy = "write"
}
