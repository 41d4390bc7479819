#!/usr/bin/env bash
# test/k8s/run.sh — vgpu-host-kube against a real, upstream Kubernetes control plane and
# kubelet on this machine (no containers run: the CRI is upstream's fake runtime, recording),
# once per fake host root:
#
#   consumer  two GeForce RTX 3080 on vfio-pci (nvidia.com/GA102_GEFORCE_RTX_3080)
#   lab       the real-kernel lab snapshot, host/testdata/lab-snapshot.tar.gz, with its real
#             names: two ATI Rage 128 bound to vfio-pci (amd.com/RAGE_4_RAGE_128_PRO_AGP_4X)
#   nvidia    a generated NVIDIA vendor-VFIO host: two L40S VFs of vGPU type 1160
#             (nvidia.com/NVIDIA_L40S-8Q)
#
# test/k8s/fakehost builds each root and says what the kubelet must show for it (the resource,
# the KubeVirt env name, each device's /dev/vfio nodes). What it proves, step by step (each
# prints PASS/FAIL; the summary is at the end):
#   a  the device plugin registers with the real kubelet (v1beta1 Registration on kubelet.sock)
#      and the Node's capacity/allocatable carry the host's resource: 2
#   b  Pods asking for it are scheduled by kube-scheduler, admitted by the kubelet, the kubelet
#      calls Allocate, and the CRI CreateContainer the kubelet sends carries the plugin's
#      PCI_RESOURCE_<NAME> env and exactly the device's /dev/vfio nodes; a Pod beyond
#      capacity stays Pending (FailedScheduling: Insufficient ...)
#   c  a device turned unhealthy (its /dev/vfio/N gone) drops allocatable, and comes back; the
#      plugin restarted registers again; the kubelet restarted gets the plugin back
#   d  (DRA) vgpu-host-kube dra publishes the host's devices as a ResourceSlice; two Pods with
#      a ResourceClaimTemplate get claims made by kube-controller-manager's resourceclaim
#      controller, allocated by kube-scheduler (a CEL selector on the driver's resourceName
#      attribute), prepared by the driver through the kubelet: each container's CRI config
#      names the CDI device the driver returned, whose spec carries PCI_RESOURCE_<NAME>=<the
#      allocated device> and its /dev/vfio nodes; a third Pod stays Pending; the first Pod
#      deleted, the kubelet unprepares (CDI spec removed), its claim is deleted, and the third
#      Pod gets the freed device
#
# Pieces: etcd, kube-apiserver (self-signed serving cert from --cert-dir, static tokens,
# AlwaysAllow), kube-controller-manager (resourceclaim and garbage-collector controllers),
# kube-scheduler, kubelet (KubeletConfiguration below: no QoS cgroups, no swap check, cgroup
# v1 allowed), test/k8s/fakecri (k8s.io/cri-client/pkg/fake + a recorder), all built by
# test/k8s/build.sh into $K8S_CACHE/bin. Each host runs on a fresh control plane under
# $K8S_WORK/<host> (default /tmp/vgpu-k8s, short for unix socket paths), on non-default ports;
# the kubelet's root is there, not /var/lib/kubelet. Needs root (the kubelet).
#
# Usage: test/k8s/run.sh [--host HOST]... [STEPS]   (default: every host, steps "a b c d")
# The whole run's output is kept in test/k8s/out/run.log ($K8S_OUT), each host's component
# logs, CRI recording, CDI specs and expectations under test/k8s/out/<host>/.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${K8S_CACHE:-/var/cache/vgpu-host-k8s}
BIN=$CACHE/bin
HOSTS=()
while [ $# -gt 0 ]; do
  case $1 in
    --host) HOSTS+=("$2"); shift 2 ;;
    --host=*) HOSTS+=("${1#--host=}"); shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
STEPS=${*:-a b c d}

# The whole run: each host in a fresh child run (its own control plane), all output kept in
# $K8S_OUT/run.log, each host's logs and recordings in $K8S_OUT/<host>/.
if [ -z "${K8S_HOST:-}" ]; then
  [ ${#HOSTS[@]} -gt 0 ] || HOSTS=(consumer lab nvidia)
  OUT=${K8S_OUT:-$repo/test/k8s/out}
  W0=${K8S_WORK:-/tmp/vgpu-k8s}
  mkdir -p "$OUT" || exit 1
  all() {
    local h rc=0 t0=$SECONDS
    echo "test/k8s/run.sh: hosts ${HOSTS[*]}, steps $STEPS, started $(date -u +%FT%TZ) on $(uname -n), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
    for h in "${HOSTS[@]}"; do
      echo
      echo "######## host $h ########"
      # A child that stops early must not pass a previous run's files off as its own.
      rm -f "$W0/$h/summary.txt"
      touch "$OUT/.start"
      K8S_HOST=$h K8S_WORK=$W0/$h "$0" $STEPS || rc=1
      rm -rf "${OUT:?}/$h"
      mkdir -p "$OUT/$h"
      [ -e "$W0/$h/summary.txt" ] && cp "$W0/$h/summary.txt" "$OUT/$h/"
      if [ "$W0/$h/expect.json" -nt "$OUT/.start" ]; then
        for f in logs cdi cri-record.jsonl expect.json; do
          [ -e "$W0/$h/$f" ] && cp -r "$W0/$h/$f" "$OUT/$h/"
        done
      fi
    done
    echo
    echo "== all hosts ($((SECONDS - t0))s) =="
    for h in "${HOSTS[@]}"; do
      if [ -s "$OUT/$h/summary.txt" ]; then sed "s/^/$h: /" "$OUT/$h/summary.txt"; else echo "$h: FAIL the run stopped before any step (see above)"; fi
    done
    rm -f "$OUT/.start"
    echo "full log: $OUT/run.log; per host: $OUT/<host>/"
    return $rc
  }
  all 2>&1 | tee "$OUT/run.log"
  rc=${PIPESTATUS[0]}
  exit "$rc"
fi

HOST=$K8S_HOST
W=${K8S_WORK:-/tmp/vgpu-k8s/$HOST}
NODE=vgpu-node
ETCD_PORT=23790 API_PORT=26443 SCHED_PORT=20259 KCM_PORT=20257 KUBELET_PORT=20250 KUBELET_HEALTHZ=20248
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
  for n in dra deviceplugin kubelet scheduler controller-manager apiserver fakecri etcd; do stop "$n"; done
  # the kubelet's pod directories may hold mounts (none expected: no volumes are used)
  grep -q " $W/" /proc/mounts && awk -v w="$W/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l
  [ -n "${made_var_lib_kubelet:-}" ] && rm -rf /var/lib/kubelet
  log "logs and recordings kept in $W"
  echo
  echo "== summary ($((SECONDS - start))s) =="
  [ ${#results[@]} -gt 0 ] || results+=("FAIL no step ran: the run stopped before its first step (see above)")
  if [ -e "$W/.vgpu-host-k8s" ]; then
    printf '%s\n' "${results[@]}" | tee "$W/summary.txt"
  else
    printf '%s\n' "${results[@]}"
  fi
  ! printf '%s\n' "${results[@]}" | grep -q '^FAIL' || exit 1
}
trap cleanup EXIT
trap "exit 130" INT TERM

need=(etcd kube-apiserver kube-scheduler kubelet fakecri)
case " $STEPS " in *" d "*) need+=(kube-controller-manager) ;; esac
for b in "${need[@]}"; do
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
"$repo/bin/k8s-fakehost" -host "$HOST" -snapshot "$repo/host/testdata/lab-snapshot.tar.gz" "$W/host" >"$W/expect.json" || exit 1
RES=$(jq -r .resource "$W/expect.json")
ENVNAME=$(jq -r .env "$W/expect.json")
log "host $HOST: $(jq -c . "$W/expect.json")"

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

# The controller-manager runs only what DRA needs: the resourceclaim controller makes a Pod's
# claims from its ResourceClaimTemplates (and deletes them when the Pod is gone), the garbage
# collector removes what the Pod owned.
[[ " $STEPS " != *" d "* ]] || bg controller-manager "$BIN/kube-controller-manager" --kubeconfig "$W/kubeconfig" --leader-elect=false \
  --controllers resourceclaim-controller,garbage-collector-controller --use-service-account-credentials=false \
  --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --cert-dir "$W/pki/kcm" \
  --authentication-kubeconfig "$W/kubeconfig" --authorization-kubeconfig "$W/kubeconfig" --v 2
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
    --root-dir "$W/kubelet" --cert-dir "$W/pki/kubelet" --hostname-override "$NODE" --v 2 --vmodule manager=3
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
cri_env() { jq -r --arg p "$1" --arg e "$2" 'select(.pod == $p) | .envs[]? | select(.key == $e) | .value' "$W/cri-record.jsonl" | tail -1; }
cri_nodes() { jq -r --arg p "$1" 'select(.pod == $p) | [.devices[]?.host_path] | join(",")' "$W/cri-record.jsonl" | tail -1; }
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
  local rec a b
  for p in gpu-a gpu-b; do
    rec=$(jq -c --arg p $p 'select(.pod == $p)' "$W/cri-record.jsonl" | tail -1)
    echo "CRI CreateContainer for $p: $rec"
    # The env names one of the host's devices, and the container gets exactly that device's
    # /dev/vfio nodes (the container's and its groups', companions' included).
    echo "$rec" | jq -e --arg e "$ENVNAME" --slurpfile x "$W/expect.json" '
      ([.envs[]? | select(.key == $e) | .value]) as $v
      | ($v | length == 1) and ($x[0].devices[$v[0]] != null)
        and ([.devices[]? | .host_path] | sort) == ($x[0].devices[$v[0]] | sort)
        and ([.devices[]? | select(.host_path != .container_path)] | length == 0)' >/dev/null || ok=0
  done
  a=$(cri_env gpu-a "$ENVNAME")
  b=$(cri_env gpu-b "$ENVNAME")
  [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] || ok=0
  [ $ok = 1 ] && pass "b: gpu-a ($a: $(cri_nodes gpu-a)) and gpu-b ($b: $(cri_nodes gpu-b)) Running, Allocate's $ENVNAME and exactly their /dev/vfio nodes in their CRI configs" ||
    fail "b: pods/CRI config (gpu-a '$a', gpu-b '$b'; expected $(jq -c .devices "$W/expect.json"))"
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
  local n0 node
  # A device turned unhealthy drops allocatable: one device's group node /dev/vfio/N vanishes
  # (the plugin checks it, kube/deviceplugin), and comes back.
  node=$(jq -r .unhealthy_node "$W/expect.json")
  mv "$W/host/$node" "$W/vfio-node.away"
  if wait_for 30 "allocatable 1 with /$node gone" node_is allocatable 1; then
    pass "c: a device turned unhealthy (/$node gone) drops allocatable to $(node_res allocatable), capacity $(node_res capacity)"
  else
    fail "c: /$node gone: allocatable $(node_res allocatable)"; tail -5 "$W/logs/deviceplugin.log"
  fi
  mv "$W/vfio-node.away" "$W/host/$node"
  if wait_for 30 "allocatable back to 2 once healthy" node_is allocatable 2; then
    pass "c: healthy again: allocatable $(node_res allocatable)"
  else
    fail "c: /$node back: allocatable $(node_res allocatable)"
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

dra_pod_json() { # dra_pod_json NAME: a Pod whose claim "gpu" is made from the template "gpu"
  cat <<J
{"apiVersion":"v1","kind":"Pod","metadata":{"name":"$1","namespace":"default"},
 "spec":{"automountServiceAccountToken":false,"terminationGracePeriodSeconds":1,"tolerations":[{"operator":"Exists"}],
  "resourceClaims":[{"name":"gpu","resourceClaimTemplateName":"gpu"}],
  "containers":[{"name":"vm","image":"registry.example/virt-launcher:test","imagePullPolicy":"IfNotPresent","resources":{"claims":[{"name":"gpu"}]}}]}}
J
}
# pod_claim POD: the name of the claim the controller made for the Pod's "gpu" claim.
pod_claim() { k GET "/api/v1/namespaces/default/pods/$1" | jq -r '.status.resourceClaimStatuses[]? | select(.name == "gpu") | .resourceClaimName // empty'; }
claim() { k GET "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/$1"; }
# dra_check POD: the Pod's generated claim is allocated to one of the host's devices, and the
# container's CRI config names the CDI device the driver wrote for it: env and /dev/vfio nodes
# of that device. Prints the device ID.
dra_check() {
  local p=$1 c cj dev uid id rec cdi spec
  c=$(pod_claim "$p")
  [ -n "$c" ] || { echo "dra_check $p: no generated claim in the Pod's status" >&2; return 1; }
  cj=$(claim "$c")
  dev=$(echo "$cj" | jq -r '.status.allocation.devices.results[0].device // empty')
  uid=$(echo "$cj" | jq -r .metadata.uid)
  id=$(jq -r --arg d "$dev" '.dra_devices | to_entries[] | select(.value == $d) | .key' "$W/expect.json")
  echo "claim $c (made from template gpu, owner $(echo "$cj" | jq -c '[.metadata.ownerReferences[]? | .kind + "/" + .name]')): $(echo "$cj" | jq -c '.status | {allocation: .allocation.devices.results, reservedFor}')" >&2
  [ -n "$id" ] || { echo "dra_check $p: claim $c allocated '$dev', not a device of this host" >&2; return 1; }
  rec=$(jq -c --arg p "$p" 'select(.pod == $p)' "$W/cri-record.jsonl" | tail -1)
  echo "CRI CreateContainer for $p: $rec" >&2
  cdi=$(echo "$rec" | jq -r '[.cdi[]?.name] | join(" ")')
  [ "$cdi" = "vgpu-host.io/gpu=$uid-$dev" ] || { echo "dra_check $p: CRI CDI devices '$cdi', want vgpu-host.io/gpu=$uid-$dev" >&2; return 1; }
  spec="$W/cdi/vgpu-host.io-gpu_$uid.json"
  echo "CDI spec $spec: $(jq -c . "$spec" 2>&1)" >&2
  jq -e --arg n "$uid-$dev" --arg env "$ENVNAME=$id" --arg id "$id" --slurpfile x "$W/expect.json" '
    .kind == "vgpu-host.io/gpu" and ([.devices[] | select(.name == $n)] | length == 1)
    and ([.devices[] | select(.name == $n) | .containerEdits.env[]] == [$env])
    and ([.devices[] | select(.name == $n) | .containerEdits.deviceNodes[].path] | sort) == ($x[0].devices[$id] | sort)' "$spec" >/dev/null ||
    { echo "dra_check $p: CDI spec $spec does not carry $ENVNAME=$id and $(jq -c --arg id "$id" '.devices[$id]' "$W/expect.json")" >&2; return 1; }
  echo "$id"
}

step_d() {
  log "== d: DRA (ResourceClaimTemplate → kube-controller-manager → kube-scheduler → kubelet → driver)"
  stop deviceplugin
  k DELETE /api/v1/namespaces/default/pods/gpu-a >/dev/null; k DELETE /api/v1/namespaces/default/pods/gpu-b >/dev/null; k DELETE /api/v1/namespaces/default/pods/gpu-c >/dev/null
  # The DRA plugin uses rest.InClusterConfig: a private mount namespace gives it the usual
  # service-account files (the admin token, the apiserver's self-signed cert as CA).
  echo -n "$TOKEN" >"$W/sa/token"
  cp "$W/pki/apiserver.crt" "$W/sa/ca.crt"
  echo -n default >"$W/sa/namespace"
  mkdir -p "$W/kubelet/plugins/gpu.vgpu-host.io" "$W/kubelet/plugins_registry"
  bg dra env KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=$API_PORT NODE_NAME=$NODE \
    unshare -m bash -c "mkdir -p /var/run/secrets/kubernetes.io/serviceaccount && mount --bind $W/sa /var/run/secrets/kubernetes.io/serviceaccount && exec $repo/bin/vgpu-host-kube --host-root $W/host --interval 2s dra --cdi-dir $W/cdi --plugin-dir $W/kubelet/plugins/gpu.vgpu-host.io --registrar-dir $W/kubelet/plugins_registry"
  local ok=1 want got
  want=$(jq -c '[.dra_devices[]] | sort' "$W/expect.json")
  slice_devices() { k GET /apis/resource.k8s.io/v1/resourceslices | jq -c --arg n "$NODE" '[.items[] | select(.spec.nodeName == $n and .spec.driver == "gpu.vgpu-host.io") | .spec.devices[].name] | sort'; }
  slices_are() { [ "$(slice_devices)" = "$1" ]; }
  if wait_for 60 "ResourceSlice with $want" slices_are "$want"; then
    pass "d: the driver published a ResourceSlice for $NODE with $(slice_devices)"
  else
    fail "d: ResourceSlices: $(slice_devices), want $want"; ok=0
  fi
  k GET /apis/resource.k8s.io/v1/resourceslices | jq -c '.items[] | {name: .metadata.name, node: .spec.nodeName, pool: .spec.pool, devices: [.spec.devices[] | {name, attributes: (.attributes | map_values(.string // .int))}]}'
  k POST /apis/resource.k8s.io/v1/deviceclasses \
    '{"apiVersion":"resource.k8s.io/v1","kind":"DeviceClass","metadata":{"name":"gpu.vgpu-host.io"},"spec":{"selectors":[{"cel":{"expression":"device.driver == \"gpu.vgpu-host.io\""}}]}}' | jq -r '"created deviceclass " + .metadata.name'
  # The template selects on the driver's resourceName attribute: the same name as the device
  # plugin's resource, evaluated by the real scheduler's CEL.
  k POST /apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates \
    "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaimTemplate\",\"metadata\":{\"name\":\"gpu\"},\"spec\":{\"spec\":{\"devices\":{\"requests\":[{\"name\":\"gpu\",\"exactly\":{\"deviceClassName\":\"gpu.vgpu-host.io\",\"selectors\":[{\"cel\":{\"expression\":\"device.attributes[\\\"gpu.vgpu-host.io\\\"].resourceName == \\\"$RES\\\"\"}}]}}]}}}}" |
    jq -r '"created resourceclaimtemplate " + .metadata.name + ": " + (.spec.spec.devices.requests[0].exactly.selectors[0].cel.expression // .message // "?")'
  for p in dra-a dra-b; do k POST /api/v1/namespaces/default/pods "$(dra_pod_json $p)" | jq -r '"created pod " + .metadata.name'; done
  local ida idb
  for p in dra-a dra-b; do
    wait_for 90 "pod $p Running" pod_is $p Running || { ok=0; k GET /api/v1/namespaces/default/pods/$p | jq -c '.status'; }
  done
  ida=$(dra_check dra-a) || ok=0
  idb=$(dra_check dra-b) || ok=0
  [ -n "$ida" ] && [ "$ida" != "$idb" ] || ok=0
  [ $ok = 1 ] && pass "d: claims made from the template by kube-controller-manager ($(pod_claim dra-a), $(pod_claim dra-b)), allocated by kube-scheduler, prepared by the driver: dra-a Running with $ENVNAME=$ida, dra-b with $idb (CDI devices in their CRI configs, env and /dev/vfio nodes in the driver's specs)" ||
    fail "d: claims from the template (dra-a '$ida', dra-b '$idb')"
  k POST /api/v1/namespaces/default/pods "$(dra_pod_json dra-c)" | jq -r '"created pod " + .metadata.name'
  sleep 8
  local msg
  msg=$(k GET /api/v1/namespaces/default/pods/dra-c | jq -r '[.status.phase, (.status.conditions[]? | select(.type=="PodScheduled") | .reason + ": " + .message)] | join(" ")')
  log "dra-c: $msg"
  case $msg in Pending*Unschedulable*claim*) pass "d: dra-c beyond the host's devices stays Pending ($msg)" ;; *) fail "d: dra-c: $msg" ;; esac
  # Deleting dra-a: the kubelet unprepares its claim (the driver removes the CDI spec), the
  # controller deletes the claim it made, and dra-c gets the freed device.
  local ca uida
  ca=$(pod_claim dra-a)
  uida=$(claim "$ca" | jq -r .metadata.uid)
  k DELETE /api/v1/namespaces/default/pods/dra-a | jq -r '"deleted pod " + .metadata.name'
  gone() { [ ! -e "$1" ]; }
  claim_gone() { [ "$(claim "$1" | jq -r .code)" = 404 ]; }
  if wait_for 60 "CDI spec of $ca removed" gone "$W/cdi/vgpu-host.io-gpu_$uida.json" &&
    wait_for 60 "claim $ca deleted" claim_gone "$ca" &&
    wait_for 60 "pod dra-c Running" pod_is dra-c Running; then
    local idc
    if idc=$(dra_check dra-c) && [ "$idc" = "$ida" ]; then
      pass "d: dra-a deleted: its claim unprepared (CDI spec removed) and deleted; dra-c Running with the freed $idc"
    else
      fail "d: dra-c after dra-a: '$idc', want $ida"
    fi
  else
    fail "d: dra-a deleted: CDI spec $( [ -e "$W/cdi/vgpu-host.io-gpu_$uida.json" ] && echo kept || echo removed), claim $ca $(claim "$ca" | jq -r '.metadata.name // "gone"'), dra-c $(pod_phase dra-c)"
  fi
  # The kubelet's DRA manager (--vmodule manager=3) on each claim it prepares for a Pod.
  grep -E '"Processing resource"|[Uu]nprepar' "$W/logs/kubelet.log" | cut -c1-300 | head -8
  grep -iE 'claim' "$W/logs/controller-manager.log" | grep -vE 'FLAG|Caches populated|garbagecollector' | cut -c1-300 | head -6
}

for s in $STEPS; do "step_$s"; done
