#!/usr/bin/env bash
# test/k8s/run.sh — vgpu-host-kube against a real, upstream Kubernetes control plane and
# kubelet on this machine (no containers run: the CRI is upstream's fake runtime, recording).
#
# What it proves, step by step (each prints PASS/FAIL; the summary is at the end):
#   a  the device plugin registers with the real kubelet (v1beta1 Registration on kubelet.sock)
#      and the Node's capacity/allocatable carry nvidia.com/GA102_GEFORCE_RTX_3080: 2
#   b  Pods asking for it are scheduled by kube-scheduler, admitted by the kubelet, the kubelet
#      calls Allocate, and the CRI CreateContainer the kubelet sends carries the plugin's
#      PCI_RESOURCE_NVIDIA_COM_GA102_GEFORCE_RTX_3080 env and /dev/vfio device nodes; a Pod
#      beyond capacity stays Pending (FailedScheduling: Insufficient ...)
#   c  a device turned unhealthy (its /dev/vfio/N gone) drops allocatable, and comes back; the
#      plugin restarted registers again; the kubelet restarted gets the plugin back
#   d  (DRA) vgpu-host-kube dra publishes ResourceSlices, the scheduler allocates a
#      ResourceClaim of DeviceClass gpu.vgpu-host.io, the kubelet prepares it (CDI device in
#      the container's CRI config)
#
# Pieces: etcd, kube-apiserver (self-signed serving cert from --cert-dir, static tokens,
# AlwaysAllow), kube-scheduler, kubelet (KubeletConfiguration below: no QoS cgroups, no swap
# check, cgroup v1 allowed), test/k8s/fakecri (k8s.io/cri-client/pkg/fake + a recorder), all
# built by test/k8s/build.sh into $K8S_CACHE/bin; the host is test/k8s/fakehost's fake root:
# two RTX 3080 on vfio-pci. Everything lives under $K8S_WORK (default /tmp/vgpu-k8s, short for
# unix socket paths) and on non-default ports; the kubelet's root is $K8S_WORK/kubelet, not
# /var/lib/kubelet. Needs root (the kubelet). Usage: test/k8s/run.sh [STEPS] (default "a b c d").
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${K8S_CACHE:-/var/cache/vgpu-host-k8s}
W=${K8S_WORK:-/tmp/vgpu-k8s}
BIN=$CACHE/bin
STEPS=${*:-a b c d}
NODE=vgpu-node
RES=nvidia.com/GA102_GEFORCE_RTX_3080
ENVNAME=PCI_RESOURCE_NVIDIA_COM_GA102_GEFORCE_RTX_3080
ETCD_PORT=23790 API_PORT=26443 SCHED_PORT=20259 KUBELET_PORT=20250 KUBELET_HEALTHZ=20248
TOKEN=vgpu-host-k8s-admin-token
API=https://127.0.0.1:$API_PORT
start=$SECONDS
declare -A PIDS
results=()

log() { printf '%s [%4ds] %s\n' "$(date -u +%T)" $((SECONDS - start)) "$*"; }
pass() { results+=("PASS $*"); log "PASS $*"; }
fail() { results+=("FAIL $*"); log "FAIL $*"; }
k() { # k METHOD PATH [JSON]
  local m=$1 p=$2
  if [ $# -ge 3 ]; then
    curl -sk -X "$m" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' --data-binary "$3" "$API$p"
  else
    curl -sk -X "$m" -H "Authorization: Bearer $TOKEN" "$API$p"
  fi
}
# wait_for SECONDS DESCRIPTION COMMAND...: poll every second until COMMAND succeeds.
wait_for() {
  local n=$1 what=$2; shift 2
  local t0=$SECONDS
  while ! "$@" >/dev/null 2>&1; do
    if [ $((SECONDS - t0)) -ge "$n" ]; then log "timed out after ${n}s waiting for $what"; return 1; fi
    sleep 1
  done
  log "$what after $((SECONDS - t0))s"
}
bg() { # bg NAME COMMAND...: start in the background, output to $W/logs/NAME.log
  local name=$1; shift
  "$@" >>"$W/logs/$name.log" 2>&1 &
  PIDS[$name]=$!
  log "started $name (pid ${PIDS[$name]}): $*"
}
stop() { # stop NAME: SIGTERM the process we started, wait for it
  local pid=${PIDS[$1]:-}
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null
  for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  unset "PIDS[$1]"
  log "stopped $1"
}
cleanup() {
  for n in dra deviceplugin kubelet scheduler apiserver fakecri etcd; do stop "$n"; done
  # the kubelet's pod directories may hold mounts (none expected: no volumes are used)
  grep -q " $W/" /proc/mounts && awk -v w="$W/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l
  [ -n "${made_var_lib_kubelet:-}" ] && rm -rf /var/lib/kubelet
  log "logs and recordings kept in $W"
  echo
  echo "== summary ($((SECONDS - start))s) =="
  printf '%s\n' "${results[@]}"
  [ ${#results[@]} -gt 0 ] && ! printf '%s\n' "${results[@]}" | grep -q '^FAIL' || exit 1
}
trap cleanup EXIT
trap "exit 130" INT TERM

for b in etcd kube-apiserver kube-scheduler kubelet fakecri; do
  [ -x "$BIN/$b" ] || { echo "run.sh: $BIN/$b missing: run test/k8s/build.sh first" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "run.sh: the kubelet needs root" >&2; exit 1; }
[ -x "$repo/bin/vgpu-host-kube" ] || (cd "$repo" && go build -o bin/vgpu-host-kube ./cmd/vgpu-host-kube) || exit 1
(cd "$repo" && go build -o bin/k8s-fakehost ./test/k8s/fakehost) || exit 1

# A fresh work directory (only ever the one this script made: it carries a marker).
if [ -e "$W" ]; then
  [ -e "$W/.vgpu-host-k8s" ] || { echo "run.sh: $W exists and is not ours" >&2; exit 1; }
  awk -v w="$W/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l
  rm -rf "$W"
fi
mkdir -p "$W"/{logs,pki,kubelet,cdi,sa}
# The kubelet serves the device plugin registration socket at the fixed path
# /var/lib/kubelet/device-plugins/kubelet.sock whatever its --root-dir: create it, and remove
# it at the end when this script made /var/lib/kubelet.
DP_DIR=/var/lib/kubelet/device-plugins
[ -e /var/lib/kubelet ] || made_var_lib_kubelet=1
mkdir -p "$DP_DIR"
touch "$W/.vgpu-host-k8s"
"$repo/bin/k8s-fakehost" "$W/host" >/dev/null || exit 1

# Credentials: one static admin token (system:masters), the service-account signing key.
echo "$TOKEN,admin,admin,system:masters" >"$W/tokens.csv"
openssl genrsa -out "$W/pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$W/pki/sa.key" -pubout -out "$W/pki/sa.pub" 2>/dev/null
cat >"$W/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "$API", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: "$TOKEN"}}]
contexts: [{name: local, context: {cluster: local, user: admin}}]
current-context: local
KC

log "versions: $("$BIN/kube-apiserver" --version) / $("$BIN/kubelet" --version) / etcd $("$BIN/etcd" --version | head -1)"

bg etcd "$BIN/etcd" --name vgpu-k8s --data-dir "$W/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
  --initial-cluster vgpu-k8s=http://127.0.0.1:23800 --listen-metrics-urls ""
wait_for 60 "etcd healthy" curl -sf "http://127.0.0.1:$ETCD_PORT/health" || exit 1

bg apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address 127.0.0.1 --advertise-address 192.0.2.1 --endpoint-reconciler-type none --secure-port "$API_PORT" --cert-dir "$W/pki" \
  --token-auth-file "$W/tokens.csv" --authorization-mode AlwaysAllow \
  --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$W/pki/sa.pub" \
  --service-account-signing-key-file "$W/pki/sa.key" --service-cluster-ip-range 10.96.0.0/24 \
  --disable-admission-plugins ServiceAccount,TaintNodesByCondition --v 1
wait_for 180 "kube-apiserver ready" bash -c "curl -skf -H 'Authorization: Bearer $TOKEN' $API/readyz" || exit 1

bg scheduler "$BIN/kube-scheduler" --kubeconfig "$W/kubeconfig" --leader-elect=false \
  --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --cert-dir "$W/pki/sched" --v 2
bg fakecri "$BIN/fakecri" -endpoint "unix://$W/cri.sock" -record "$W/cri-record.jsonl"

cat >"$W/kubelet.yaml" <<KC
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
failSwapOn: false
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
localStorageCapacityIsolation: false
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: ""
syncFrequency: 5s
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 5s
containerRuntimeEndpoint: unix://$W/cri.sock
KC
start_kubelet() {
  bg kubelet "$BIN/kubelet" --config "$W/kubelet.yaml" --kubeconfig "$W/kubeconfig" \
    --root-dir "$W/kubelet" --cert-dir "$W/pki/kubelet" --hostname-override "$NODE" --v 2
}
start_kubelet
wait_for 180 "node $NODE registered" bash -c "curl -skf -H 'Authorization: Bearer $TOKEN' $API/api/v1/nodes/$NODE" || exit 1
node_res() { k GET "/api/v1/nodes/$NODE" | jq -r ".status.$1[\"$RES\"] // \"none\""; }
node_is() { [ "$(node_res "$1")" = "$2" ]; }
wait_for 120 "node $NODE Ready" bash -c "curl -sk -H 'Authorization: Bearer $TOKEN' $API/api/v1/nodes/$NODE | jq -e '.status.conditions[] | select(.type==\"Ready\" and .status==\"True\")'" ||
  k GET "/api/v1/nodes/$NODE" | jq -c '.status.conditions'

start_plugin() {
  bg deviceplugin "$repo/bin/vgpu-host-kube" --host-root "$W/host" --kubelet-dir "$DP_DIR" --interval 2s
}

pod_json() { # pod_json NAME COUNT
  cat <<J
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$1","namespace":"default"},
 "spec":{"automountServiceAccountToken":false,"terminationGracePeriodSeconds":1,
  "tolerations":[{"operator":"Exists"}],
  "containers":[{"name":"vm","image":"registry.example/virt-launcher:test","imagePullPolicy":"IfNotPresent",
    "resources":{"limits":{"$RES":"$2"}}}]}}
J
}
pod_phase() { k GET "/api/v1/namespaces/default/pods/$1" | jq -r '.status.phase'; }
pod_is() { [ "$(pod_phase "$1")" = "$2" ]; }

step_a() {
  log "== a: device plugin registration"
  start_plugin
  if wait_for 60 "capacity $RES=2" node_is capacity 2 && node_is allocatable 2; then
    pass "a: kubelet registered the plugin; node capacity/allocatable $RES = $(node_res capacity)/$(node_res allocatable)"
  else
    fail "a: node capacity $RES = $(node_res capacity), allocatable $(node_res allocatable)"
  fi
  grep -iE 'regist' "$W/logs/deviceplugin.log" | head -5
  grep -E 'device_plugin|Registered|plugin.*'"$RES" "$W/logs/kubelet.log" | grep -iE 'regist' | head -5
  k GET "/api/v1/nodes/$NODE" | jq -c '{capacity: .status.capacity, allocatable: .status.allocatable}'
}

step_b() {
  log "== b: Pods using the resource"
  for p in gpu-a gpu-b; do k POST /api/v1/namespaces/default/pods "$(pod_json $p 1)" | jq -r '"created pod " + .metadata.name'; done
  local ok=1
  for p in gpu-a gpu-b; do
    wait_for 120 "pod $p Running" pod_is $p Running || { ok=0; k GET /api/v1/namespaces/default/pods/$p | jq -c '.status'; }
  done
  local rec
  for p in gpu-a gpu-b; do
    rec=$(jq -c --arg p $p 'select(.pod == $p)' "$W/cri-record.jsonl" | tail -1)
    echo "CRI CreateContainer for $p: $rec"
    if echo "$rec" | jq -e --arg e $ENVNAME '[.envs[]? | select(.key == $e)] | length == 1' >/dev/null &&
      echo "$rec" | jq -e '[.devices[]? | select(.host_path | startswith("/dev/vfio/"))] | length >= 2' >/dev/null; then :; else ok=0; fi
  done
  local a b
  a=$(jq -r 'select(.pod == "gpu-a") | .envs[]? | select(.key | startswith("PCI_RESOURCE")) | .value' "$W/cri-record.jsonl" | tail -1)
  b=$(jq -r 'select(.pod == "gpu-b") | .envs[]? | select(.key | startswith("PCI_RESOURCE")) | .value' "$W/cri-record.jsonl" | tail -1)
  [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] || ok=0
  [ $ok = 1 ] && pass "b: gpu-a ($a) and gpu-b ($b) Running, Allocate's env and /dev/vfio nodes in their CRI configs" ||
    fail "b: pods/CRI config (gpu-a '$a', gpu-b '$b')"
  k POST /api/v1/namespaces/default/pods "$(pod_json gpu-c 1)" | jq -r '"created pod " + .metadata.name'
  sleep 8
  local msg
  msg=$(k GET /api/v1/namespaces/default/pods/gpu-c | jq -r '[.status.phase, (.status.conditions[]? | select(.type=="PodScheduled") | .reason + ": " + .message)] | join(" ")')
  log "gpu-c: $msg"
  case $msg in Pending*Unschedulable*Insufficient*) pass "b: gpu-c beyond capacity stays Pending ($msg)" ;; *) fail "b: gpu-c: $msg" ;; esac
  grep -E 'Allocate|allocat' "$W/logs/kubelet.log" | head -5
}

step_c() {
  log "== c: health, then restarts"
  local n0
  # A device turned unhealthy drops allocatable: gpu-a's group node /dev/vfio/2 vanishes (the
  # plugin checks it, kube/deviceplugin), and comes back.
  mv "$W/host/dev/vfio/2" "$W/vfio-2.away"
  if wait_for 30 "allocatable 1 with gpu-a unhealthy" node_is allocatable 1; then
    pass "c: a device turned unhealthy (its /dev/vfio/2 gone) drops allocatable to $(node_res allocatable), capacity $(node_res capacity)"
  else
    fail "c: /dev/vfio/2 gone: allocatable $(node_res allocatable)"; tail -5 "$W/logs/deviceplugin.log"
  fi
  mv "$W/vfio-2.away" "$W/host/dev/vfio/2"
  if wait_for 30 "allocatable back to 2 once healthy" node_is allocatable 2; then
    pass "c: healthy again: allocatable $(node_res allocatable)"
  else
    fail "c: /dev/vfio/2 back: allocatable $(node_res allocatable)"
  fi
  n0=$(grep -c 'Registered\|registered' "$W/logs/deviceplugin.log")
  stop deviceplugin
  start_plugin
  if wait_for 60 "plugin registered again" bash -c "[ \$(grep -c 'Registered\|registered' $W/logs/deviceplugin.log) -gt $n0 ]" &&
    wait_for 60 "allocatable back to 2" node_is allocatable 2; then
    pass "c: plugin restart re-registers (allocatable $(node_res allocatable))"
  else
    fail "c: plugin restart: allocatable $(node_res allocatable)"; tail -5 "$W/logs/deviceplugin.log"
  fi
  n0=$(grep -c 'Registered\|registered' "$W/logs/deviceplugin.log")
  stop kubelet
  start_kubelet
  if wait_for 90 "plugin registered with the new kubelet" bash -c "[ \$(grep -c 'Registered\|registered' $W/logs/deviceplugin.log) -gt $n0 ]" &&
    wait_for 90 "kubelet healthy" curl -sf "http://127.0.0.1:$KUBELET_HEALTHZ/healthz" &&
    wait_for 60 "allocatable 2 after kubelet restart" node_is allocatable 2; then
    pass "c: kubelet restart: the plugin is back (allocatable $(node_res allocatable)), pods: $(pod_phase gpu-a)/$(pod_phase gpu-b)/$(pod_phase gpu-c)"
  else
    fail "c: kubelet restart: allocatable $(node_res allocatable)"; tail -5 "$W/logs/deviceplugin.log"
  fi
}

step_d() {
  log "== d: DRA"
  stop deviceplugin
  # The DRA plugin uses rest.InClusterConfig: a private mount namespace gives it the usual
  # service-account files (the admin token, no CA: the apiserver's cert is self-signed).
  echo -n "$TOKEN" >"$W/sa/token"
  cp "$W/pki/apiserver.crt" "$W/sa/ca.crt"
  echo -n default >"$W/sa/namespace"
  mkdir -p "$W/kubelet/plugins/gpu.vgpu-host.io" "$W/kubelet/plugins_registry"
  bg dra env KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=$API_PORT NODE_NAME=$NODE \
    unshare -m bash -c "mkdir -p /var/run/secrets/kubernetes.io/serviceaccount && mount --bind $W/sa /var/run/secrets/kubernetes.io/serviceaccount && exec $repo/bin/vgpu-host-kube --host-root $W/host --interval 2s dra --cdi-dir $W/cdi --plugin-dir $W/kubelet/plugins/gpu.vgpu-host.io --registrar-dir $W/kubelet/plugins_registry"
  local ok=1
  wait_for 60 "ResourceSlices published" bash -c "curl -sk -H 'Authorization: Bearer $TOKEN' $API/apis/resource.k8s.io/v1/resourceslices | jq -e '.items | length > 0'" || ok=0
  k GET /apis/resource.k8s.io/v1/resourceslices | jq -c '.items[] | {name: .metadata.name, node: .spec.nodeName, pool: .spec.pool, devices: [.spec.devices[] | .name]}'
  k POST /apis/resource.k8s.io/v1/deviceclasses \
    '{"apiVersion":"resource.k8s.io/v1","kind":"DeviceClass","metadata":{"name":"gpu.vgpu-host.io"},"spec":{"selectors":[{"cel":{"expression":"device.driver == \"gpu.vgpu-host.io\""}}]}}' | jq -r '"created deviceclass " + .metadata.name'
  k POST /apis/resource.k8s.io/v1/namespaces/default/resourceclaims \
    '{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"gpu-claim"},"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu.vgpu-host.io"}}]}}}' | jq -r '"created claim " + .metadata.name'
  # The device-plugin pods hold both GPUs' resource only in the device plugin's books; DRA's
  # devices are the same GPUs: delete them first, as a node runs one or the other.
  k DELETE /api/v1/namespaces/default/pods/gpu-a >/dev/null; k DELETE /api/v1/namespaces/default/pods/gpu-b >/dev/null; k DELETE /api/v1/namespaces/default/pods/gpu-c >/dev/null
  k POST /api/v1/namespaces/default/pods \
    '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"dra-a"},"spec":{"automountServiceAccountToken":false,"terminationGracePeriodSeconds":1,"tolerations":[{"operator":"Exists"}],"resourceClaims":[{"name":"gpu","resourceClaimName":"gpu-claim"}],"containers":[{"name":"vm","image":"registry.example/virt-launcher:test","resources":{"claims":[{"name":"gpu"}]}}]}}' | jq -r '"created pod " + .metadata.name'
  wait_for 60 "claim allocated" bash -c "curl -sk -H 'Authorization: Bearer $TOKEN' $API/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/gpu-claim | jq -e '.status.allocation'" || ok=0
  k GET /apis/resource.k8s.io/v1/namespaces/default/resourceclaims/gpu-claim | jq -c '.status'
  wait_for 90 "pod dra-a Running" pod_is dra-a Running || { ok=0; k GET /api/v1/namespaces/default/pods/dra-a | jq -c '.status'; }
  local rec
  rec=$(jq -c 'select(.pod == "dra-a")' "$W/cri-record.jsonl" | tail -1)
  echo "CRI CreateContainer for dra-a: $rec"
  for f in "$W"/cdi/*.json; do echo "CDI spec $f:"; jq -c . "$f"; done
  echo "$rec" | jq -e '(.cdi // []) | length > 0' >/dev/null || ok=0
  [ $ok = 1 ] && pass "d: ResourceSlices published, claim allocated, pod dra-a Running with CDI devices $(echo "$rec" | jq -c '[.cdi[]?.name]')" ||
    fail "d: DRA (see above)"
}

for s in $STEPS; do "step_$s"; done
