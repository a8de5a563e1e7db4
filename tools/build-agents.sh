#!/usr/bin/env bash
# build-agents.sh builds the pinned Nomad and Consul agents from Go modules,
# once, into a cache outside this project's module graph.
#
#   GPUSHARE_TOOLS_DIR   where the binaries live
#                        (default: ${XDG_CACHE_HOME:-$HOME/.cache}/gpushare/tools)
#
# Each agent is built in a throwaway module of its own under the cache, so its
# dependency versions never leak into this repository's go.mod. A second run
# finds the binaries, checks their versions and returns at once.
set -euo pipefail

NOMAD_VERSION=1.11.3
NOMAD_API_VERSION=v0.0.0-20260907080526-08ef8f3d26da
CONSUL_VERSION=1.20.6

tools_dir=${GPUSHARE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpushare/tools}

need() {
  command -v "$1" >/dev/null 2>&1 || { echo "build-agents: '$1' not found: $2" >&2; exit 1; }
}
need go "install Go 1.24 or newer (https://go.dev/doc/install) and put it on PATH"
need gcc "install a C compiler (Debian: apt-get install gcc)"

mkdir -p "$tools_dir/bin"

# check NAME WANT: succeeds when the cached binary reports version WANT.
check() {
  local bin="$tools_dir/bin/$1"
  [ -x "$bin" ] || return 1
  local out
  out=$("$bin" version 2>/dev/null) || return 1
  [[ "$out" == *"v$2"* ]]
}

# build NAME MODULE VERSION [go.mod extra lines...]
build() {
  local name=$1 module=$2 version=$3
  shift 3
  local work="$tools_dir/src/$name-$version"
  rm -rf "$work"
  mkdir -p "$work"
  {
    echo "module gpushare.local/agents/$name"
    echo
    echo "go 1.24"
    echo
    echo "require $module v$version"
    for line in "$@"; do echo "$line"; done
  } >"$work/go.mod"
  echo "build-agents: building $name v$version into $tools_dir/bin (takes a few minutes, once)" >&2
  local log="$work/build.log"
  if ! (cd "$work" && GOFLAGS=-mod=mod go build -trimpath -o "$tools_dir/bin/$name.new" "$module") >"$log" 2>&1; then
    echo "build-agents: building $name v$version failed; the build said:" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
  mv "$tools_dir/bin/$name.new" "$tools_dir/bin/$name"
}

if ! check nomad "$NOMAD_VERSION"; then
  build nomad github.com/hashicorp/nomad "$NOMAD_VERSION" \
    "require github.com/hashicorp/nomad/api $NOMAD_API_VERSION" \
    "replace github.com/Microsoft/go-winio => github.com/endocrimes/go-winio v0.4.13-0.20190628114223-fb47a8b41948" \
    "replace github.com/hashicorp/hcl => github.com/hashicorp/hcl v1.0.1-nomad-1"
fi
if ! check consul "$CONSUL_VERSION"; then
  GONOSUMDB=${GONOSUMDB:+$GONOSUMDB,}github.com/hashicorp/consul-awsauth \
    build consul github.com/hashicorp/consul "$CONSUL_VERSION"
fi

for name in nomad consul; do
  want=$NOMAD_VERSION; [ "$name" = consul ] && want=$CONSUL_VERSION
  if ! check "$name" "$want"; then
    echo "build-agents: $tools_dir/bin/$name does not report v$want:" >&2
    "$tools_dir/bin/$name" version >&2 || true
    exit 1
  fi
done
nomad_v=$("$tools_dir/bin/nomad" version)
consul_v=$("$tools_dir/bin/consul" version)
echo "build-agents: ${nomad_v%%$'\n'*}, ${consul_v%%$'\n'*} in $tools_dir/bin" >&2
