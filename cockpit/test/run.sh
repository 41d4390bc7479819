#!/usr/bin/env bash
# The Cockpit page in a real browser (make test-web; docs/cockpit.md, "Tests"): Debian's
# chromium, headless, driven by puppeteer-core, logs in to a real cockpit-ws (Debian's 287),
# opens the page "GPUs" and works the bundled real-kernel snapshot through a real agent.
#
# Set up here, all of it removed on exit (a trap), nothing else on this machine changed:
#   - the lab snapshot (host/testdata/lab-snapshot.tar.gz) unpacked into a temporary root;
#   - the agent built with -tags fakekernel (cmd/vgpu-host-agent/fakekernel_hook.go): its sysfs writes
#     go to hosttest's kernel emulator, as in the Go tests, so a bind moves the group's drivers
#     and an mdev create makes the instance; libvirt is the file-backed vgpu-fake:///;
#   - a throwaway local user whose primary group is the agent's --group: a real PAM login, and a
#     bridge that talks to the socket as that user (no sudo: superuser "try" falls back to the
#     user, a member of the socket's group). The user exists only in this script's own mount
#     namespace (unshare -m): copies of /etc/passwd, /etc/shadow, /etc/group and /etc/gshadow
#     with the user's lines added are bind-mounted over the real ones there, and so are empty
#     copies of the login records (wtmp, btmp, lastlog), so the machine's own files never change;
#   - the page, copied into that user's ~/.local/share/cockpit/vgpu-host, and the test's socket
#     in ~/.config/cockpit/vgpu-host.override.json (how users name another socket);
#   - cockpit-ws on 127.0.0.1, a free port, without TLS;
#   - for the last step, a second agent on the real H200 capture (../shared/fixtures/nvidia-h200:
#     its sysfs, and NVML's answers replayed by the NVML helper) on the same socket.
# Screenshots of each step: .cache/web/screenshots/ (kept; gitignored).
# Needs root (the mount namespace, the agent), scripts/deps.sh web, node_modules (npm ci) and
# cockpit/dist.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
[ "$(id -u)" = 0 ] || { echo "test-web: needs root (a private mount namespace for the throwaway user, the agent)" >&2; exit 1; }
if [ -z "${VGPU_WEB_NS:-}" ]; then
  # Everything below runs in a mount namespace of its own: the user's passwd lines and the
  # login's records are bind mounts that vanish with it, even after a kill -9.
  VGPU_WEB_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi
[ -f cockpit/dist/index.js ] || { echo "test-web: cockpit/dist missing: run make cockpit" >&2; exit 1; }
export PATH=/usr/local/go/bin:$PATH

work=$(mktemp -d /tmp/vgpu-web.XXXXXX)
chmod 0755 "$work" # the user's bridge reaches the socket below it; the agent checks it is root's and not writable
user=vgpuweb$$
pids=()
mounts=()
cleanup() {
  local rc=$?
  [ -f "$work/agent2.pid" ] && pids+=($(cat "$work/agent2.pid"))
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "${uid:-}" ]; then
    # The user's session (cockpit-session, cockpit-bridge) ends with cockpit-ws; wait for it.
    for _ in $(seq 50); do pgrep -U "$uid" >/dev/null || break; sleep 0.1; done
    for p in $(pgrep -U "$uid" || true); do kill "$p" 2>/dev/null || true; done
    sleep 0.2
  fi
  for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || true; done
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT

root=$work/root
mkdir -p "$root"
tar -xzf host/testdata/lab-snapshot.tar.gz -C "$root"

echo "test-web: building the agent with the kernel emulator (-tags fakekernel) and the NVML helper"
CGO_ENABLED=0 go build -trimpath -tags urfave_cli_no_template,fakekernel -o "$work/vgpu-host-agent" ./cmd/vgpu-host-agent
go build -trimpath -o "$work/vgpu-host-nvml" ./cmd/vgpu-host-nvml

# The last step's host: the real NVIDIA H200 capture (its sysfs, NVML's answers replayed), for
# the MIG section. A shared fixture: missing, the test fails in CI and skips that step here.
h200=../shared/fixtures/nvidia-h200
if [ -f "$h200/sysfs-snapshot.tar.gz" ] && [ -f "$h200/nvml-facts.json" ]; then
  mkdir -p "$work/h200"
  tar -xzf "$h200/sysfs-snapshot.tar.gz" -C "$work/h200"
  export H200_ROOT=$work/h200 NVML_FACTS=$(realpath "$h200/nvml-facts.json") NVML_HELPER=$work/vgpu-host-nvml
elif [ -n "${CI:-}" ]; then
  echo "test-web: CI must run the MIG step, but $h200 (sysfs-snapshot.tar.gz, nvml-facts.json) is missing" >&2
  exit 1
else
  echo "test-web: WARNING: $h200 missing: the MIG step (the H200 capture) is skipped here (CI fails instead)" >&2
fi

# The throwaway user, in this namespace only: its lines appended to copies of the account
# files, bind-mounted over the real ones (useradd and chpasswd would replace the real files by
# rename, which a bind mount does not allow, and would change the machine). A uid and gid free
# on this machine.
pass="vgpu-web-$RANDOM-$RANDOM"
uid=$(awk -F: 'BEGIN { u = 61000 } { used[$3] = 1 } END { while (used[u]) u++; print u }' /etc/passwd /etc/group)
hash=$(openssl passwd -6 "$pass")
mkdir -p "$work/etc" "$work/log"
for f in passwd shadow group gshadow; do
  [ -f "/etc/$f" ] || continue
  cp -p "/etc/$f" "$work/etc/$f"
done
echo "$user:x:$uid:$uid::$work/home:/bin/bash" >>"$work/etc/passwd"
echo "$user:$hash:20000:0:99999:7:::" >>"$work/etc/shadow"
echo "$user:x:$uid:" >>"$work/etc/group"
[ -f "$work/etc/gshadow" ] && echo "$user:!::" >>"$work/etc/gshadow"
for f in passwd shadow group gshadow; do
  [ -f "$work/etc/$f" ] || continue
  mount --bind "$work/etc/$f" "/etc/$f"
  mounts+=("/etc/$f")
done
for f in /var/log/wtmp /var/log/btmp /var/log/lastlog; do
  [ -f "$f" ] || continue
  : >"$work/log/${f##*/}"
  mount --bind "$work/log/${f##*/}" "$f"
  mounts+=("$f")
done
getent passwd "$user" >/dev/null || { echo "test-web: the throwaway user $user is not visible in the namespace" >&2; exit 1; }
pkg=$work/home/.local/share/cockpit/vgpu-host
mkdir -p "$pkg"
cp -r cockpit/dist/. "$pkg/"
sock=$root/run/vgpu-host/agent.sock
# The test's socket, named as docs/cockpit.md tells users to: a manifest override (the user's
# own here, ~/.config/cockpit, instead of /etc/cockpit).
mkdir -p "$work/home/.config/cockpit"
jq -n --arg s "$sock" '{config: {socket: $s}}' >"$work/home/.config/cockpit/vgpu-host.override.json"
chown -R "$user:$user" "$work/home"

# A quarantine record (docs/health.md) for the second GPU, as a failed handback check leaves it.
mkdir -p "$root/var/lib/vgpu-host/quarantine"
echo '{"version":1,"address":"0000:02:00.0","problems":[{"check":"config-space","detail":"config space reads all ones: the function fell off the bus"}],"since":"2026-11-26T05:00:00Z","op":"destroy train-02"}' \
  >"$root/var/lib/vgpu-host/quarantine/0000:02:00.0.json"

# A VM disk for the spec the browser applies (QEMU never starts: the libvirt is a file).
qemu-img create -q -f qcow2 "$root/web-vm.qcow2" 64M

VGPU_HOST_FAKE_KERNEL=1 "$work/vgpu-host-agent" agent --host-root "$root" --group "$user" \
  --connect "vgpu-fake://$root/libvirt.json" --log-level info 2>"$work/agent.log" &
agent_pid=$!
pids+=($agent_pid)
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$work/agent.log"; echo "test-web: the agent did not start" >&2; exit 1; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
/usr/lib/cockpit/cockpit-ws --no-tls --address 127.0.0.1 --port "$port" 2>"$work/ws.log" &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done

mkdir -p .cache/web/screenshots
rm -f .cache/web/screenshots/*.png
rc=0
(cd cockpit && COCKPIT_URL="http://127.0.0.1:$port" COCKPIT_USER="$user" COCKPIT_PASSWORD="$pass" \
  VM_DISK="$root/web-vm.qcow2" AGENT_PID="$agent_pid" AGENT_BIN="$work/vgpu-host-agent" AGENT_SOCKET="$sock" \
  AGENT2_PIDFILE="$work/agent2.pid" AGENT2_LOG="$work/agent2.log" SCREENSHOTS="$repo/.cache/web/screenshots" CHROMIUM=/usr/bin/chromium \
  node test/browser.test.js) || rc=$?
if [ $rc -ne 0 ]; then
  echo "--- agent log (last 40 lines)"; tail -40 "$work/agent.log"
  [ -f "$work/agent2.log" ] && { echo "--- the H200 agent's log (last 20 lines)"; tail -20 "$work/agent2.log"; }
  echo "--- cockpit-ws log"; tail -20 "$work/ws.log"
fi
exit $rc
