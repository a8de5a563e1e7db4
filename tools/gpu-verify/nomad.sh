#!/usr/bin/env bash
# `nomad job run` with a GPU fraction on a real GPU host, by hand: a Nomad
# agent (server and client) with the gpushare plugin on NVML, a job holding
# 25 shares that runs a real CUDA program, the plugin's per-task usage, and
# a job that outgrows its 10-share memory limit killed by the plugin.
# Needs NOMAD (the nomad binary), PLUGIN (nomad-device-gpushare) and the
# NVIDIA driver; OUT is where the logs go.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/gpu-verify}
dir=$(mktemp -d)
mkdir -p "$OUT" "$dir/plugins" "$dir/data"
cp "$PLUGIN" "$dir/plugins/nomad-device-gpushare"
export NOMAD_ADDR=http://127.0.0.1:4646
step() { echo; echo "######## $*"; }
poll() { # poll SECONDS CMD...: run CMD every 0.5 s until it succeeds
  local end=$(( $(date +%s) + $1 )); shift
  until "$@" 2>/dev/null; do
    kill -0 $agent 2>/dev/null || { echo "the Nomad agent exited:"; tail -5 "$OUT/nomad.log"; exit 1; }
    [ "$(date +%s)" -lt $end ] || { echo "timed out: $*"; return 1; }
    sleep 0.5
  done
}
cat > "$dir/agent.hcl" <<HCL
data_dir   = "$dir/data"
plugin_dir = "$dir/plugins"
bind_addr  = "127.0.0.1"
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
server {
  enabled          = true
  bootstrap_expect = 1
}
client {
  enabled           = true
  network_interface = "lo"
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
plugin "nomad-device-gpushare" {
  config {
    backend = "${BACKEND:-nvml}"
    switch_settle_period = "1s"
    nomad_poll_period = "500ms"
    usage_listen = "127.0.0.1:4700"
  }
}
HCL
"$NOMAD" agent -config "$dir/agent.hcl" > "$OUT/nomad.log" 2>&1 &
agent=$!
trap 'kill $agent; wait $agent 2>/dev/null' EXIT

step "the node offers the GPU as shares"
has_shares() { "$NOMAD" node status -self -json 2>/dev/null | python3 -c '
import json,sys; n=json.load(sys.stdin)
ds=[d for d in (n.get("NodeResources") or {}).get("Devices") or [] if d["Type"]=="gpu-share"]
sys.exit(0 if any(i["Healthy"] for d in ds for i in d["Instances"]) else 1)'; }
poll 60 has_shares && "$NOMAD" node status -self -verbose | sed -n '/Device Group Attributes/,/^$/p' | head -40

job() { # job NAME SHARES MIB HOLD [LIMIT [SECONDS_PER_CHUNK]]
local meta=""
[ -n "${5:-}" ] && meta="meta { gpushare_limit = \"$5\" }"
cat > "$dir/$1.nomad.hcl" <<HCL
job "$1" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "python3"
        args    = ["$here/cuda_alloc.py", "$3", "$4", "${6:-0}"]
      }
      $meta
      resources {
        cpu = 100
        memory = 256
        device "nvidia/gpu-share" { count = $2 }
      }
    }
  }
}
HCL
"$NOMAD" job run -detach "$dir/$1.nomad.hcl"
}
usage() { curl -s 127.0.0.1:4700/v1/usage; }
tenant_uses() { usage | python3 -c '
import json,sys; u=json.load(sys.stdin)
sys.exit(0 if any(t["job"]==sys.argv[1] and t["used_mib"]>=int(sys.argv[2]) for t in u.get("tenants") or []) else 1)' "$1" "$2"; }

step "nomad job run: 25 shares, a CUDA program using 8192 MiB"
job quarter 25 8000 600
poll 60 tenant_uses quarter 8000; echo "rc=$?"
"$NOMAD" job status quarter | tail -4
alloc=$("$NOMAD" job allocs -json quarter | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["ID"])')
"$NOMAD" alloc logs "$alloc" t
"$NOMAD" alloc exec -task t "$alloc" env 2>/dev/null | grep -E '^(GPUSHARE|CUDA_VISIBLE|NVIDIA_VISIBLE)' || "$NOMAD" alloc status "$alloc" | head -30
usage | python3 -c 'import json,sys; u=json.load(sys.stdin); print(json.dumps({k: u.get(k) for k in ("tenants", "outside", "gpus")}, indent=1))'

step "a 10-share job that grows to 30000 MiB is killed past its limit"
job greedy 10 30000 600
dead() { "$NOMAD" job allocs -json greedy | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)[0]["ClientStatus"] == "failed" else 1)'; }
poll 60 dead; echo "rc=$?"
galloc=$("$NOMAD" job allocs -json greedy | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["ID"])')
"$NOMAD" alloc status "$galloc" | sed -n '/Recent Events/,$p'
"$NOMAD" alloc logs "$galloc" t
usage | python3 -c 'import json,sys; u=json.load(sys.stdin); print(json.dumps({k: u.get(k) for k in ("recent_kills", "gpus", "errors")}, indent=1))'
"$NOMAD" job status quarter | tail -3
grep -iE 'kill|reclaim' "$OUT/nomad.log" | grep -v DEBUG | tail -10

step "reclaim: a borrower above its request is killed when the owner of the memory grows"
"$NOMAD" job stop -purge quarter > /dev/null
job borrower 40 90000 600 1.0
poll 60 tenant_uses borrower 90000; echo "borrower at 90000 MiB: rc=$?"
job owner 40 50000 600 "" 0.05
failed() { "$NOMAD" job allocs -json "$1" | python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)[0]["ClientStatus"] == "failed" else 1)'; }
poll 60 failed borrower; echo "borrower failed: rc=$?"
poll 60 tenant_uses owner 50000; echo "owner at 50000 MiB: rc=$?"
usage | python3 -c 'import json,sys; u=json.load(sys.stdin); print(json.dumps(u.get("recent_kills"), indent=1)); print([(t["job"], t["used_mib"], t["request_mib"], t["limit_mib"]) for t in u.get("tenants") or []])'
"$NOMAD" job status owner | tail -2
