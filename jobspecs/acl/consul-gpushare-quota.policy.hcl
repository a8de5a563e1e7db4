# Consul ACL policy for the gpushare quota service, with the default KV
# prefix "gpushare" (-kv-prefix / GPUSHARE_KV_PREFIX); change the prefix
# below if you change it there.
#
#   consul acl policy create -name gpushare-quota \
#     -rules @jobspecs/acl/consul-gpushare-quota.policy.hcl
#   consul acl token create -description "gpushare quota service" -policy-name gpushare-quota
#
# Give the token's secret to the service as CONSUL_HTTP_TOKEN.

# Quota documents are written by people (people-quota-admin.consul.policy.hcl)
# or terraform/: the service only reads them.
key_prefix "gpushare/quotas/" {
  policy = "read"
}

# Department documents (projects grouped one level up), written by the
# same people or terraform/: read only.
key_prefix "gpushare/departments/" {
  policy = "read"
}

# Project and service status, and the reports of rejected quota documents.
key_prefix "gpushare/status/" {
  policy = "write"
}

# The record written before every stop.
key_prefix "gpushare/suspended/" {
  policy = "write"
}

# Shrink records: the elastic groups the service scaled down.
key_prefix "gpushare/shrunk/" {
  policy = "write"
}

# The bounded history of actions.
key_prefix "gpushare/history/" {
  policy = "write"
}

# The leader lock (KV acquire and release with a session).
key "gpushare/leader" {
  policy = "write"
}

# The lock's session: create, renew and destroy it. It is bound to the
# local Consul agent's node, whose name is not known in advance; narrow ""
# to your nodes' name prefix if they share one.
session_prefix "" {
  policy = "write"
}
