# Consul ACL policy for people who manage quotas: write the quota
# documents, read everything the service reports.
key_prefix "gpushare/quotas/" {
  policy = "write"
}
key_prefix "gpushare/" {
  policy = "read"
}
