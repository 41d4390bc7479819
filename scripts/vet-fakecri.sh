#!/usr/bin/env bash
# go vet of test/k8s/fakecri (-tags k8sfakecri): the one file behind a tag that this module's
# vet passes cannot reach, because it imports upstream's fake CRI (k8s.io/cri-api,
# k8s.io/cri-client) and go.mod does not depend on Kubernetes. Like test/k8s/build.sh, it is
# vetted in a scratch module of its own, at the staging version of the Kubernetes that
# test/k8s/build.sh builds (its K8S_VERSION), so `make lint` vets every tagged file.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
k8s=$(sed -n 's/^K8S_VERSION=${K8S_VERSION:-\(v1\.[0-9.]*\)}$/\1/p' test/k8s/build.sh)
[ -n "$k8s" ] || { echo "scripts/vet-fakecri.sh: no K8S_VERSION default in test/k8s/build.sh" >&2; exit 1; }
staging=v0.${k8s#v1.}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
{
	echo "module vgpuhost.local/fakecri"
	echo
	grep -E '^go [0-9]' go.mod
	echo
	echo "require ("
	echo "	k8s.io/cri-api $staging"
	echo "	k8s.io/cri-client $staging"
	echo ")"
} >"$dir/go.mod"
cp test/k8s/fakecri/main.go "$dir/main.go"
(cd "$dir" && go mod tidy >/dev/null 2>&1) || { (cd "$dir" && go mod tidy) >&2; echo "scripts/vet-fakecri.sh: cannot resolve the fake CRI's modules at $staging" >&2; exit 1; }
echo "go vet -tags k8sfakecri ./test/k8s/fakecri (scratch module, k8s.io/cri-* $staging)"
(cd "$dir" && go vet -tags k8sfakecri .)
