#!/usr/bin/env bash
# build-agents.sh builds the pinned Nomad and Consul agents, OpenTofu and
# HashiCorp's Nomad provider from Go modules, once, into a cache outside this
# project's module graph.
#
#   GPUSHARE_TOOLS_DIR   where the binaries live
#                        (default: ${XDG_CACHE_HOME:-$HOME/.cache}/gpushare/tools)
#
# Each tool is built in a throwaway module of its own under the cache, so its
# dependency versions never leak into this repository's go.mod. A second run
# finds the binaries, checks their versions and returns at once.
set -euo pipefail

NOMAD_VERSION=1.11.3
NOMAD_API_VERSION=v0.0.0-20260907080526-08ef8f3d26da
CONSUL_VERSION=1.20.6
# OpenTofu runs terraform/ in the tests (the Terraform registry cannot be
# reached from CI; OpenTofu builds from its Go module).
TOFU_VERSION=1.10.7
TOFU_HCL_REPLACE="github.com/hashicorp/hcl/v2 v2.20.1 => github.com/opentofu/hcl/v2 v2.20.2-0.20251021132045-587d123c2828"
# HashiCorp's Nomad provider: the module proxy serves v1.4.20's source
# archive but not its go.mod, so the archive is fetched, checked against
# this digest and built as a main module with its own go.mod and go.sum.
NOMAD_PROVIDER_VERSION=1.4.20
NOMAD_PROVIDER_ZIP_SHA256=fc25d87eed4623469ac8464d477040796ea2ceae79a8a9333b4ab2656d3e1662

tools_dir=${GPUSHARE_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gpushare/tools}

need() {
  command -v "$1" >/dev/null 2>&1 || { echo "build-agents: '$1' not found: $2" >&2; exit 1; }
}
need go "install Go 1.24 or newer (https://go.dev/doc/install) and put it on PATH"
need gcc "install a C compiler (Debian: apt-get install gcc)"
need curl "install curl (Debian: apt-get install curl)"
need unzip "install unzip (Debian: apt-get install unzip)"

mkdir -p "$tools_dir/bin"

# check NAME WANT: succeeds when the cached binary reports version WANT.
check() {
  local bin="$tools_dir/bin/$1"
  [ -x "$bin" ] || return 1
  local out
  out=$("$bin" version 2>/dev/null) || return 1
  [[ "$out" == *"v$2"* ]]
}

# build NAME MODULE VERSION [go.mod extra lines...]: builds package
# ${PKG:-MODULE} with ${LDFLAGS} into bin/NAME.
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
  if ! (cd "$work" && GOFLAGS=-mod=mod go build -trimpath -ldflags "${LDFLAGS:-}" -o "$tools_dir/bin/$name.new" "${PKG:-$module}") >"$log" 2>&1; then
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

if ! check tofu "$TOFU_VERSION"; then
  PKG=github.com/opentofu/opentofu/cmd/tofu LDFLAGS="-X github.com/opentofu/opentofu/version.dev=no" \
    build tofu github.com/opentofu/opentofu "$TOFU_VERSION" "replace $TOFU_HCL_REPLACE"
fi

# The provider has no version command: its file name carries the version
# (the name a provider mirror wants) and its build info the module path.
nomad_provider=terraform-provider-nomad_v$NOMAD_PROVIDER_VERSION
check_provider() {
  local bin="$tools_dir/bin/$nomad_provider"
  [ -x "$bin" ] && go version -m "$bin" 2>/dev/null | grep -q $'^\tpath\tgithub.com/hashicorp/terraform-provider-nomad$'
}

# build_nomad_provider fetches the provider's source archive from the module
# proxy, checks its digest and builds it with its own go.mod and go.sum.
build_nomad_provider() {
  local module=github.com/hashicorp/terraform-provider-nomad version=v$NOMAD_PROVIDER_VERSION
  local work="$tools_dir/src/terraform-provider-nomad-$NOMAD_PROVIDER_VERSION"
  local proxy=${GOPROXY:-https://proxy.golang.org}
  proxy=${proxy%%[,|]*}
  case $proxy in direct | off | "") proxy=https://proxy.golang.org ;; esac
  rm -rf "$work"
  mkdir -p "$work"
  echo "build-agents: building $nomad_provider into $tools_dir/bin (a few minutes, once)" >&2
  if ! curl -fsSL -o "$work/src.zip" "$proxy/$module/@v/$version.zip"; then
    echo "build-agents: cannot fetch $module@$version from $proxy" >&2
    exit 1
  fi
  local sum
  sum=$(sha256sum "$work/src.zip" | cut -d' ' -f1)
  if [ "$sum" != "$NOMAD_PROVIDER_ZIP_SHA256" ]; then
    echo "build-agents: $module@$version from $proxy has SHA-256 $sum, want $NOMAD_PROVIDER_ZIP_SHA256" >&2
    exit 1
  fi
  (cd "$work" && unzip -q src.zip)
  if ! (cd "$work/$module@$version" && go build -trimpath -o "$tools_dir/bin/$nomad_provider.new" .) >"$work/build.log" 2>&1; then
    echo "build-agents: building $nomad_provider failed; the build said:" >&2
    tail -n 40 "$work/build.log" >&2
    exit 1
  fi
  mv "$tools_dir/bin/$nomad_provider.new" "$tools_dir/bin/$nomad_provider"
}
check_provider || build_nomad_provider

for name in nomad consul tofu; do
  case $name in
    nomad) want=$NOMAD_VERSION ;;
    consul) want=$CONSUL_VERSION ;;
    tofu) want=$TOFU_VERSION ;;
  esac
  if ! check "$name" "$want"; then
    echo "build-agents: $tools_dir/bin/$name does not report v$want:" >&2
    "$tools_dir/bin/$name" version >&2 || true
    exit 1
  fi
done
if ! check_provider; then
  echo "build-agents: $tools_dir/bin/$nomad_provider is not HashiCorp's Nomad provider" >&2
  exit 1
fi
nomad_v=$("$tools_dir/bin/nomad" version)
consul_v=$("$tools_dir/bin/consul" version)
tofu_v=$("$tools_dir/bin/tofu" version 2>/dev/null)
echo "build-agents: ${nomad_v%%$'\n'*}, ${consul_v%%$'\n'*}, ${tofu_v%%$'\n'*}, $nomad_provider in $tools_dir/bin" >&2
