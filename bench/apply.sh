#!/usr/bin/env bash
# apply overhead against virsh, on the same libvirtd in the same run:
#   - N x `vgpu-host apply --no-start SPEC` (one process each: spec load, host scan, ledger
#     transactions, resolve, build, journal, define) against N x `virsh define --validate XML`
#     of the very same domain XML (one process each), interleaved so both see the same load.
#     The goal's peer is issue 19's: plain `virsh define` of the same XML. Goal <= 1.1x.
#     apply asks libvirt to validate against its RNG schema (VIR_DOMAIN_DEFINE_VALIDATE), so
#     the ratio against `virsh define --validate` (the same libvirt work) is printed too.
#     apply reaches qemu:///system through vgpu-host's own pure-Go client of libvirtd's socket;
#     the same applies through the libvirt helper (VGPU_HOST_LIBVIRT_DIRECT=0: libvirt's own
#     client, loaded in vgpu-host-libvirt) are timed too, for the difference.
#   - the same applies through the host agent (`vgpu-host agent`, one warm libvirt connection;
#     each `vgpu-host --agent always apply` is still a process: the CLI sending its command
#     line), against the same `virsh define`. Goal <= 1.1x (issue 15).
#   - plan latency: one `vgpu-host plan` over 100 specs.
# Starts virtlogd/libvirtd when they are not running (needs root). Domains are named
# vgpuhost-bench-*, the ledger lives in a temporary --host-root, and everything is removed.
# Prints "apply: A ms/VM, virsh define: D ms/VM, ratio R (goal <= 1.1); ..." and
# "plan: P ms for 100 specs".
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
N=${N:-20}
URI=qemu:///system
for t in qemu-img virsh; do
	command -v $t >/dev/null || { echo "bench/apply.sh: $t missing (make bench installs it: scripts/deps.sh bench)" >&2; exit 1; }
done

if ! virsh -c "$URI" version >/dev/null 2>&1; then
	[ "$(id -u)" = 0 ] || { echo "bench/apply.sh: libvirtd is not running and we are not root" >&2; exit 1; }
	# Not "unless pgrep finds one": pgrep also sees a chroot's or container's daemons. A
	# second start fails on the pidfile, which is fine.
	virtlogd -d 2>/dev/null || true
	libvirtd -d 2>/dev/null || true
	for _ in $(seq 100); do virsh -c "$URI" version >/dev/null 2>&1 && break; sleep 0.1; done
	# Said here, naming the daemon, not later as a failed define.
	virsh -c "$URI" version >/dev/null 2>&1 || {
		echo "bench/apply.sh: libvirtd did not answer on $URI within 10 s of libvirtd -d (try it by hand: libvirtd -d; libvirt-daemon-system gives it its directories: scripts/deps.sh bench)" >&2
		exit 1
	}
fi

work=$(mktemp -d)
bin=$work/vgpu-host
agent_pid=
cleanup() {
	[ -z "$agent_pid" ] || { kill "$agent_pid" 2>/dev/null; wait "$agent_pid" 2>/dev/null || true; }
	for i in $(seq "$N"); do
		for n in "vgpuhost-bench-a$i" "vgpuhost-bench-g$i" "vgpuhost-bench-h$i" "vgpuhost-bench-v$i"; do
			virsh -c "$URI" undefine "$n" >/dev/null 2>&1 || true
		done
	done
	rm -rf "$work"
}
trap cleanup EXIT
# The binaries `make build` made (the flags users get: make bench builds them first):
# vgpu-host, the agent `vgpu-host agent` runs, and the libvirt helper, found beside vgpu-host.
. bench/lib.sh
for b in bin/vgpu-host bin/vgpu-host-agent bin/vgpu-host-libvirt; do
	[ -x "$b" ] || { echo "bench/apply.sh: $b missing: make build" >&2; exit 1; }
	installed "$b" "$work" >/dev/null # as a host has them (lib.sh)
done
root=$work/root
mkdir -p "$root" "$work/specs" "$work/xml"
qemu-img create -q -f qcow2 "$work/disk.qcow2" 64M

spec() { # spec NAME -> the virtio-gpu fallback example named NAME on our blank disk
	sed -e "s/name: vgpu-fallback/name: $1/" -e "s#/var/lib/libvirt/images/vgpu-fallback.qcow2#$work/disk.qcow2#" \
		examples/virtio-gpu-fallback.yaml
}
for i in $(seq "$N"); do
	spec "vgpuhost-bench-a$i" >"$work/specs/a$i.yaml"
	spec "vgpuhost-bench-g$i" >"$work/specs/g$i.yaml"
	spec "vgpuhost-bench-h$i" >"$work/specs/h$i.yaml"
	# The same XML apply defines, under another name, for virsh.
	spec "vgpuhost-bench-v$i" >"$work/specs/v$i.yaml"
	"$bin" --host-root "$root" render --virt-type qemu "$work/specs/v$i.yaml" >"$work/xml/v$i.xml"
done

"$bin" --host-root "$root" agent --connect "$URI" --log-level warn 2>"$work/agent.log" &
agent_pid=$!
for _ in $(seq 100); do [ -S "$root/run/vgpu-host/agent.sock" ] && break; sleep 0.05; done

ms() { date +%s%N; }
a=0 v=0 p=0 g=0 h=0
for i in $(seq "$N"); do
	t0=$(ms)
	"$bin" --host-root "$root" --agent never -o json apply --connect "$URI" --virt-type qemu --no-start "$work/specs/a$i.yaml" >/dev/null
	t1=$(ms)
	virsh -c "$URI" define --validate "$work/xml/v$i.xml" >/dev/null
	t2=$(ms)
	virsh -c "$URI" undefine "vgpuhost-bench-v$i" >/dev/null
	t3=$(ms)
	virsh -c "$URI" define "$work/xml/v$i.xml" >/dev/null
	t4=$(ms)
	"$bin" --host-root "$root" --agent always -o json apply --connect "$URI" --virt-type qemu --no-start "$work/specs/g$i.yaml" >/dev/null
	tg=$(ms)
	VGPU_HOST_LIBVIRT_DIRECT=0 "$bin" --host-root "$root" --agent never -o json apply --connect "$URI" --virt-type qemu --no-start "$work/specs/h$i.yaml" >/dev/null
	th=$(ms)
	a=$((a + t1 - t0)) v=$((v + t2 - t1)) p=$((p + t4 - t3)) g=$((g + tg - t4)) h=$((h + th - tg))
done
for i in $(seq "$N"); do
	"$bin" --host-root "$root" -o json destroy --connect "$URI" "vgpuhost-bench-a$i" "vgpuhost-bench-g$i" "vgpuhost-bench-h$i" >/dev/null
done
kill "$agent_pid" && wait "$agent_pid" && agent_pid=

for i in $(seq 100); do spec "vgpuhost-bench-p$i" >"$work/specs/p$i.yaml"; done
t5=$(ms)
"$bin" --host-root "$root" -o json plan --connect "$URI" --virt-type qemu "$work"/specs/p*.yaml >/dev/null
t6=$(ms)

awk -v a="$a" -v v="$v" -v d="$p" -v g="$g" -v h="$h" -v n="$N" -v p=$((t6 - t5)) 'BEGIN {
	am = a / n / 1e6; vm = v / n / 1e6; dm = d / n / 1e6; gm = g / n / 1e6; hm = h / n / 1e6
	printf "apply: %.1f ms/VM, virsh define: %.1f ms/VM, ratio %.2f (goal <= 1.1); virsh define --validate: %.1f ms/VM, ratio %.2f\n", am, dm, am / dm, vm, am / vm
	printf "apply through the libvirt helper (VGPU_HOST_LIBVIRT_DIRECT=0): %.1f ms/VM, ratio %.2f to virsh define\n", hm, hm / dm
	printf "apply through the agent: %.1f ms/VM, virsh define: %.1f ms/VM, agent ratio %.2f (goal <= 1.1)\n", gm, dm, gm / dm
	printf "plan: %.0f ms for 100 specs\n", p / 1e6
}' | tee "$work/out.txt"
goal apply-vs-virsh-define "$(sed -nE 's/^apply: .*ratio ([0-9.]+) \(goal.*/\1/p' "$work/out.txt")" "<=" 1.1 || fail=1
goal apply-through-agent-vs-virsh-define "$(sed -nE 's/.*agent ratio ([0-9.]+) \(goal.*/\1/p' "$work/out.txt")" "<=" 1.1 || fail=1
[ -z "${fail:-}" ]
