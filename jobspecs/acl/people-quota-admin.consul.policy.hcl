# Consul ACL policy for people who manage quotas: write the quota and
# department documents, read what the service reports (status, history, record
# errors). Not the suspension records: they name every suspended job of
# every namespace, and the service alone reads them (their job specs are
# sealed with the service's record key besides). The longest matching
# prefix wins, so the deny below holds under the read.
key_prefix "gpushare/quotas/" {
  policy = "write"
}
key_prefix "gpushare/departments/" {
  policy = "write"
}
key_prefix "gpushare/suspended/" {
  policy = "deny"
}
key_prefix "gpushare/shrunk/" {
  policy = "deny"
}
key_prefix "gpushare/" {
  policy = "read"
}
