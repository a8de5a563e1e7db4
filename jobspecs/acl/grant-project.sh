#!/usr/bin/env bash
# grant-project.sh NAMESPACE...: lets the gpushare quota service suspend and
# resume work in each NAMESPACE, by adding nomad-gpushare-quota-project.policy.hcl
# (the namespace in place of its placeholder) to the service's Nomad policy.
# Run it with a token that may manage ACL policies when you add a project
# namespace (terraform/ does the same from its quotas):
#
#   NOMAD_TOKEN=<management token> jobspecs/acl/grant-project.sh team-a team-b
#
#   GPUSHARE_QUOTA_POLICY   the service's policy (default: gpushare-quota)
#
# A namespace the policy already grants is left as it is. The service's
# token holds the policy by name, so the change applies at once.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 NAMESPACE..." >&2; exit 2; }
command -v nomad >/dev/null 2>&1 || { echo "grant-project: the nomad CLI is not on PATH" >&2; exit 1; }
policy=${GPUSHARE_QUOTA_POLICY:-gpushare-quota}
dir=$(cd "$(dirname "$0")" && pwd)
rules=$(nomad acl policy info -t '{{.Rules}}' "$policy") ||
  { echo "grant-project: cannot read the Nomad ACL policy $policy (set GPUSHARE_QUOTA_POLICY, and NOMAD_TOKEN to a token that may manage policies)" >&2; exit 1; }
for ns in "$@"; do
  if [[ ! $ns =~ ^[a-zA-Z0-9-]{1,128}$ ]]; then
    echo "grant-project: $ns is not a Nomad namespace name" >&2
    exit 2
  fi
  block=$(sed "s/<namespace>/$ns/" "$dir/nomad-gpushare-quota-project.policy.hcl")
  # The project block of a namespace is the one that grants submit-job.
  if awk -v ns="namespace \"$ns\" {" '$0==ns{on=1} on&&/"submit-job"/{found=1} on&&/^}/{on=0} END{exit !found}' <<<"$rules"; then
    echo "grant-project: $policy already lets the service act in $ns"
    continue
  fi
  rules+=$'\n'"$block"
  echo "grant-project: $policy now lets the service act in $ns"
done
file=$(mktemp)
trap 'rm -f "$file"' EXIT
printf '%s\n' "$rules" >"$file"
nomad acl policy apply -description "gpushare quota service" "$policy" "$file" >/dev/null
