#!/usr/bin/env bash
# go vet of test/k8s/fakecri (-tags k8sfakecri): the one file behind a tag that the module's two
# vet passes (untagged and nvmlmock,crashtest,fakekernel) do not reach. It imports upstream's
# fake CRI (k8s.io/cri-api, k8s.io/cri-client), which go.mod requires at the staging version of
# the Kubernetes that test/k8s/build.sh builds (its K8S_VERSION: v1.37.2 → v0.37.2), so that
# `go vet -tags k8sfakecri ./...` works here too; this script fails when the two drift apart.
# (test/k8s/build.sh builds the file inside its Kubernetes checkout, against that version.)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
k8s=$(sed -n 's/^K8S_VERSION=${K8S_VERSION:-\(v1\.[0-9.]*\)}$/\1/p' test/k8s/build.sh)
[ -n "$k8s" ] || { echo "scripts/vet-fakecri.sh: no K8S_VERSION default in test/k8s/build.sh" >&2; exit 1; }
staging=v0.${k8s#v1.}
for m in k8s.io/cri-api k8s.io/cri-client; do
	have=$(go list -m -f '{{.Version}}' "$m")
	[ "$have" = "$staging" ] || {
		echo "scripts/vet-fakecri.sh: go.mod requires $m $have, test/k8s/build.sh builds Kubernetes $k8s (staging $staging): go get $m@$staging" >&2
		exit 1
	}
done
echo "go vet -tags k8sfakecri ./test/k8s/fakecri (k8s.io/cri-* $staging, as test/k8s/build.sh's Kubernetes $k8s)"
go vet -tags k8sfakecri ./test/k8s/fakecri
