#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver + etcd) that the k8s
# integration tests need, because prebuilt envtest binaries cannot be
# downloaded here. Binaries are cached outside the repo and reused.
#
#   kube-apiserver: built from the k8s.io/kubernetes Go module in a separate
#                   tools module (never added to spillway's go.mod).
#   etcd:           Debian's etcd-server if apt works, else built from the
#                   go.etcd.io/etcd/server/v3 module.
#
# Usage: KUBEBUILDER_ASSETS=$(bash test/k8s/assets.sh)
# Logs go to stderr; the last stdout line is the KUBEBUILDER_ASSETS path.
#
# Env:
#   SPILLWAY_K8S_VERSION  k8s.io/kubernetes version (default v1.35.4; staging
#                         modules are pinned to the matching v0.X.Y)
#   SPILLWAY_ETCD_VERSION go.etcd.io/etcd/server/v3 version for the Go fallback
#                         (default v3.6.13)
#   SPILLWAY_K8S_CACHE    cache dir (default $HOME/.cache/spillway/k8s-assets/<version>)
#   SPILLWAY_ETCD_FROM    "apt" (default, falls back to go) or "go"
set -euo pipefail

K8S_VERSION=${SPILLWAY_K8S_VERSION:-v1.35.4}
ETCD_VERSION=${SPILLWAY_ETCD_VERSION:-v3.6.13}
CACHE=${SPILLWAY_K8S_CACHE:-${HOME:-/root}/.cache/spillway/k8s-assets/${K8S_VERSION}}
ETCD_FROM=${SPILLWAY_ETCD_FROM:-apt}
# k8s.io/kubernetes v1.X.Y <-> staging modules v0.X.Y
STAGING_VERSION="v0.${K8S_VERSION#v1.}"

log() { echo "assets.sh: $*" >&2; }

mkdir -p "$CACHE/bin"
BIN="$CACHE/bin"

ok() { [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

build_apiserver() {
  local mod="$CACHE/tools-apiserver"
  log "building kube-apiserver ${K8S_VERSION} (staging ${STAGING_VERSION}) in $mod; a cold build takes several minutes"
  rm -rf "$mod"; mkdir -p "$mod"
  (
    cd "$mod"
    # GOFLAGS from the caller (e.g. -mod=vendor) must not leak into this module.
    export GOFLAGS=-buildvcs=false GOWORK=off
    cat > go.mod <<MOD
module spillway.local/k8s-assets

go 1.25
MOD
    cat > tools.go <<'GO'
//go:build tools

package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
GO
    # The kubernetes go.mod replaces each staging module with ./staging/...;
    # a consumer must replace them with the published versions instead.
    local kmod
    kmod=$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')
    [ -f "$kmod" ] || { log "could not download k8s.io/kubernetes@${K8S_VERSION}"; exit 1; }
    local staging
    staging=$(grep -oE '^[[:space:]]*k8s\.io/[a-z0-9-]+ => \./staging/' "$kmod" | awk '{print $1}' | sort -u)
    [ -n "$staging" ] || { log "no staging replaces found in $kmod"; exit 1; }
    go mod edit -require="k8s.io/kubernetes@${K8S_VERSION}"
    for m in $staging; do
      go mod edit -replace="${m}=${m}@${STAGING_VERSION}"
    done
    log "replacing $(echo "$staging" | wc -l) staging modules with ${STAGING_VERSION}"
    # Copy the rest of kubernetes' requirements so MVS picks the same versions it was tested with.
    go mod edit -json "$kmod" | python3 -c '
import json,sys
m=json.load(sys.stdin)
for r in m.get("Require") or []:
    p=r["Path"]
    if p.startswith("k8s.io/") and r["Version"].startswith("v0.0.0-0001"): continue
    print(p+"@"+r["Version"])
' > reqs.txt
    while read -r r; do
      case "$r" in k8s.io/*@v0.0.0) continue;; esac
      go mod edit -require="$r"
    done < reqs.txt
    go mod tidy -e >&2 2>&1 || true
    # Stamp the version the way kubernetes' own build does, so /version and
    # the compatibility-version logic see v1.X.Y rather than v0.0.0-master.
    local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
    local vpkg=k8s.io/component-base/version
    nice -n 10 go build -p "${SPILLWAY_BUILD_P:-2}" -trimpath \
      -ldflags="-s -w -X ${vpkg}.gitVersion=${K8S_VERSION} -X ${vpkg}.gitMajor=1 -X ${vpkg}.gitMinor=${minor} -X ${vpkg}.gitTreeState=clean" \
      -o "$BIN/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
    mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
  ) >&2
}

etcd_from_apt() {
  if ! command -v apt-get >/dev/null; then return 1; fi
  if [ ! -x /usr/bin/etcd ]; then
    log "installing etcd-server from apt"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 || return 1
    apt-get install -y -qq --no-install-recommends etcd-server >&2 || return 1
  fi
  # Debian starts a system etcd on 2379; envtest picks its own ports, but stop
  # the unit anyway so it does not hold resources.
  if command -v systemctl >/dev/null 2>&1; then systemctl stop etcd >/dev/null 2>&1 || true; fi
  ln -sf /usr/bin/etcd "$BIN/etcd"
  ok "$BIN/etcd"
}

etcd_from_go() {
  local mod="$CACHE/tools-etcd"
  log "building etcd ${ETCD_VERSION} from go.etcd.io/etcd/server/v3 in $mod"
  rm -rf "$mod"; mkdir -p "$mod"
  (
    cd "$mod"
    export GOFLAGS=-buildvcs=false GOWORK=off
    cat > go.mod <<MOD
module spillway.local/k8s-etcd

go 1.25
MOD
    cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
    go mod edit -require="go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
    go mod tidy >&2
    nice -n 10 go build -p "${SPILLWAY_BUILD_P:-2}" -trimpath -ldflags="-s -w" -o "$BIN/etcd.tmp" .
    mv "$BIN/etcd.tmp" "$BIN/etcd"
  ) >&2
}

if ok "$BIN/kube-apiserver" && "$BIN/kube-apiserver" --version 2>&1 | grep -qF "Kubernetes ${K8S_VERSION}"; then
  log "kube-apiserver cached in $BIN"
else
  build_apiserver
fi

if ok "$BIN/etcd"; then
  log "etcd cached in $BIN"
else
  rm -f "$BIN/etcd"
  if [ "$ETCD_FROM" = go ] || ! etcd_from_apt; then
    etcd_from_go
  fi
fi

ok "$BIN/kube-apiserver" || { log "kube-apiserver not runnable"; exit 1; }
ok "$BIN/etcd" || { log "etcd not runnable"; exit 1; }
log "$("$BIN/kube-apiserver" --version 2>&1 | head -1); etcd $("$BIN/etcd" --version 2>&1 | head -1)"
echo "$BIN"
