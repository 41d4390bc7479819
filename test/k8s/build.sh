#!/usr/bin/env bash
# test/k8s/build.sh — build upstream Kubernetes (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet),
# etcd, and the recording fake CRI runtime from the Go module proxy, at pinned versions,
# into a cache directory OUTSIDE the repository (never committed).
#
#   K8S_CACHE (default /var/cache/vgpu-host-k8s)   where the scratch modules and bin/ live
#   K8S_VERSION (default v1.37.2)                   k8s.io/kubernetes version
#   ETCD_VERSION (default v3.7.3)                   go.etcd.io/etcd/server/v3 version
#
# k8s.io/kubernetes's go.mod replaces every k8s.io/<staging> module with ./staging/src/...,
# which is not in the module zip; the scratch module replaces each with the published
# v0.<minor>.<patch> tag of that staging module instead (read from the go.mod itself).
# Idempotent: a binary already built for this version is kept. Prints timings per step.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CACHE=${K8S_CACHE:-/var/cache/vgpu-host-k8s}
K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
NICE=${NICE:-nice -n 10}
BIN=$CACHE/bin
mkdir -p "$BIN"
# GOFLAGS from the caller are kept (e.g. GOFLAGS=-p=2 to bound the build's parallelism).
export GOFLAGS="-mod=mod${GOFLAGS:+ $GOFLAGS}" GOTOOLCHAIN=local
t() { local s=$SECONDS; "$@"; echo "build.sh: $* took $((SECONDS - s))s" >&2; }

staging_version=v0.${K8S_VERSION#v1.}

k8s_module() {
  local dir=$CACHE/k8s-$K8S_VERSION
  mkdir -p "$dir/fakecri"
  cp "$here/fakecri/main.go" "$dir/fakecri/main.go"
  # The commands are main packages: a tools file keeps k8s.io/kubernetes in the module graph.
  printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n\t_ "k8s.io/kubernetes/cmd/kube-scheduler"\n\t_ "k8s.io/kubernetes/cmd/kubelet"\n)\n' >"$dir/tools.go"
  if [ ! -f "$dir/go.sum" ] || ! grep -q '^\s*k8s.io/kubernetes ' "$dir/go.mod"; then
    (cd "$dir" && go mod download -x k8s.io/kubernetes@"$K8S_VERSION" 2>/dev/null || true)
    local kmod
    kmod=$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION/go.mod
    {
      echo "module vgpuhost.local/k8s"
      echo
      grep -E '^go [0-9]' "$kmod"
      grep -E '^godebug' "$kmod" || true
      echo
      echo "require k8s.io/kubernetes $K8S_VERSION"
      echo
      echo "replace ("
      sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_version"'#p' "$kmod"
      echo ")"
    } > "$dir/go.mod"
    (cd "$dir" && $NICE go mod tidy)
  fi
  echo "$dir"
}

build_k8s() {
  local dir; dir=$(k8s_module)
  local want=()
  for b in kube-apiserver kubelet kube-scheduler kube-controller-manager; do
    [ -x "$BIN/$b-$K8S_VERSION" ] || want+=("k8s.io/kubernetes/cmd/$b")
  done
  # fakecri is our own code: rebuilt whenever it changed
  [ "$BIN/fakecri-$K8S_VERSION" -nt "$here/fakecri/main.go" ] || want+=(./fakecri)
  # The version stamp hack/lib/version.sh gives release builds: without it the binaries
  # (and the Node's kubeletVersion) say v0.0.0-master.
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  local ld="" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  for p in "${want[@]}"; do
    local n=${p##*/}
    (cd "$dir" && t $NICE go build -trimpath -tags k8sfakecri -ldflags "$ld" -o "$BIN/$n-$K8S_VERSION" "$p")
  done
  for b in kube-apiserver kube-controller-manager kube-scheduler kubelet fakecri; do ln -sf "$b-$K8S_VERSION" "$BIN/$b"; done
}

build_etcd() {
  [ -x "$BIN/etcd-$ETCD_VERSION" ] && { ln -sf "etcd-$ETCD_VERSION" "$BIN/etcd"; return; }
  local dir=$CACHE/etcd-$ETCD_VERSION
  mkdir -p "$dir"
  if [ ! -f "$dir/go.sum" ]; then
    cat > "$dir/go.mod" <<MOD
module vgpuhost.local/etcd

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
MOD
    cat > "$dir/tools.go" <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
    (cd "$dir" && $NICE go mod tidy)
  fi
  (cd "$dir" && t $NICE go build -trimpath -o "$BIN/etcd-$ETCD_VERSION" go.etcd.io/etcd/server/v3)
  ln -sf "etcd-$ETCD_VERSION" "$BIN/etcd"
}

total=$SECONDS
case "${1:-all}" in
  etcd) build_etcd ;;
  k8s) build_k8s ;;
  all) build_etcd; build_k8s ;;
esac
echo "build.sh: all done in $((SECONDS - total))s; binaries in $BIN" >&2
ls -l "$BIN" >&2
