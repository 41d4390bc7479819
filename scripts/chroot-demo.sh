#!/usr/bin/env bash
# Run by hand, as root: does `make demo` work on a fresh Debian 12 with nothing but Go? Makes a
# clean Debian 12 chroot with debootstrap (from the Debian mirror this machine's apt uses), plus
# make, git and ca-certificates (to type `make`, and for Go to fetch modules over HTTPS), binds
# this machine's Go toolchain (/usr/local/go) read-only into it, copies this checkout's
# committed tree into a new non-root user's home and runs `make demo` there as that user, with
# GOCACHE and GOPATH in the user's home. Prints "chroot-demo: ok" or the failure.
#
# With --test it then runs `make test` (what CI runs) as root in the same chroot, inside new PID
# and mount namespaces with their own /proc, /run and /tmp, so the chroot's libvirtd, QEMU and
# lab never see this machine's: every Debian package the tests need is installed by the
# Makefile inside the chroot. Prints "chroot-test: ok" or the failure (log: DIR.test.log).
# CHROOT_TEST_CMD replaces `make test` (e.g. one go test) for a quicker check of the set-up.
#
# Usage: scripts/chroot-demo.sh [--clean] [--test] [DIR]   (default /var/tmp/vgpu-host-chroot;
# kept for the next run, which skips debootstrap; remove it with rm -rf after unmounting, or
# pass --clean).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "chroot-demo: run as root (debootstrap, chroot, mount)" >&2; exit 1; }
clean= test=
while [ $# -gt 0 ]; do
	case "$1" in
	--clean) clean=1 ;;
	--test) test=1 ;;
	*) break ;;
	esac
	shift
done
dir=${1:-/var/tmp/vgpu-host-chroot}
goroot=${GOROOT_HOST:-/usr/local/go}
[ -x "$goroot/bin/go" ] || { echo "chroot-demo: no Go toolchain at $goroot" >&2; exit 1; }
command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }

# The first Debian mirror apt uses here (deb822 or one-line format).
mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n 1)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
[ -n "$mirror" ] || { echo "chroot-demo: no Debian mirror found in /etc/apt" >&2; exit 1; }

mounts=()
cleanup() {
	for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
	[ -z "$clean" ] || rm -rf --one-file-system "$dir"
}
trap cleanup EXIT
if [ ! -x "$dir/usr/bin/make" ]; then
	echo "chroot-demo: debootstrap bookworm into $dir"
	rm -rf --one-file-system "$dir"
	debootstrap --variant=minbase --include=make,git,ca-certificates bookworm "$dir" "$mirror" >"$dir.debootstrap.log" 2>&1 ||
		{ tail -n 20 "$dir.debootstrap.log" >&2; exit 1; }
fi
cp /etc/resolv.conf "$dir/etc/resolv.conf"
# The local CA certificates this machine trusts (if its network re-signs TLS, Go's module
# downloads need them; a host on a plain network has none), so the chroot reaches the network
# as this machine does.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
	cp /usr/local/share/ca-certificates/*.crt "$dir/usr/local/share/ca-certificates/"
	chroot "$dir" update-ca-certificates >/dev/null 2>&1
fi
mkdir -p "$dir/usr/local/go"
for m in proc sys dev; do mount --bind "/$m" "$dir/$m" && mounts+=("$dir/$m"); done
mount --bind "$goroot" "$dir/usr/local/go" && mount -o remount,bind,ro "$dir/usr/local/go" && mounts+=("$dir/usr/local/go")

chroot "$dir" id demo >/dev/null 2>&1 || chroot "$dir" useradd -m -s /bin/bash demo
rm -rf "$dir/home/demo/vgpu-host"
mkdir -p "$dir/home/demo/vgpu-host"
git archive --format=tar HEAD | tar -x -C "$dir/home/demo/vgpu-host"
chroot "$dir" chown -R demo:demo /home/demo/vgpu-host

# The module proxy settings of this machine's go, so the user fetches modules the same way.
goenv=$(PATH=$goroot/bin:$PATH go env GOPROXY GOSUMDB GOFLAGS | paste -sd'|')
IFS='|' read -r proxy sumdb flags <<<"$goenv"
echo "chroot-demo: make demo as user demo in $dir (Debian $(cat "$dir/etc/debian_version"), $("$goroot/bin/go" env GOVERSION))"
chroot "$dir" su - demo -c "export PATH=/usr/local/go/bin:\$PATH GOPROXY='$proxy' GOSUMDB='$sumdb' GOFLAGS='$flags' \
	GOCACHE=\$HOME/.cache/go-build GOPATH=\$HOME/go; cd ~/vgpu-host && make demo" >"$dir.demo.log" 2>&1 ||
	{ tail -n 30 "$dir.demo.log" >&2; echo "chroot-demo: FAIL: make demo (log: $dir.demo.log)" >&2; exit 1; }
grep -q 'bind 0000:01:00.0 --dry-run' "$dir.demo.log" || { echo "chroot-demo: FAIL: the demo did not reach bind --dry-run" >&2; exit 1; }
echo "chroot-demo: ok: make demo as a non-root user in a clean Debian 12 chroot (log: $dir.demo.log)"

[ -n "$test" ] || exit 0

# make test as root: a fresh PID namespace (pgrep and libvirtd's pidfiles see only the chroot's
# processes) and a private mount namespace (its mounts vanish with it). /sys is a recursive
# bind (cgroups for libvirtd). /dev is the chroot's own: a tmpfs with the nodes the tests use
# (null, zero, full, random, urandom, tty, a new devpts instance, shm, mqueue, net/tun, the loop
# devices for the bake test's image), never this machine's /dev: a package's postinst run
# inside the chroot would otherwise change this machine's nodes (one gave /dev/kvm the chroot's
# kvm group id, which is another group here, and libvirt-qemu lost access to it). No /dev/kvm:
# every guest in the tests runs under TCG.
# One setting differs from a host: libvirt's per-QEMU mount namespaces are off (qemu.conf
# namespaces = []), because inside a chroot libvirt cannot rebuild /dev for QEMU ("Could not
# open '/dev/urandom'"); the packages are installed first, by the Makefile's own scripts/deps.sh,
# so that qemu.conf exists to be changed.
rm -rf "$dir/root/vgpu-host"
mkdir -p "$dir/root/vgpu-host"
git archive --format=tar HEAD | tar -x -C "$dir/root/vgpu-host"
# CI clones the repository beside shared/ (the real-kernel fixtures some tests read); so does this.
if [ -d ../shared/fixtures ]; then
	rm -rf "$dir/root/shared"
	mkdir -p "$dir/root/shared"
	cp -r ../shared/fixtures "$dir/root/shared/"
fi
echo "chroot-test: make test as root in $dir (started $(date -u +%H:%M:%S) UTC)"
start=$(date +%s)
unshare --pid --fork --mount --propagation private /bin/bash -euc '
	dir=$1 goroot=$2
	# The root of the chroot must be a mount point: libvirt makes it a slave mount in the mount
	# namespace of each QEMU ("Failed disable mount propagation out of the root filesystem").
	mount --bind "$dir" "$dir"
	mount -t proc proc "$dir/proc"
	mount --rbind /sys "$dir/sys"
	mount -t tmpfs -o mode=755,nosuid tmpfs "$dir/dev"
	for n in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
		IFS=: read -r name major minor <<<"$n"
		mknod -m 666 "$dir/dev/$name" c "$major" "$minor"
	done
	mkdir -p "$dir/dev/pts" "$dir/dev/shm" "$dir/dev/mqueue" "$dir/dev/net"
	mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$dir/dev/pts"
	ln -s pts/ptmx "$dir/dev/ptmx"
	mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$dir/dev/shm"
	mount -t mqueue mqueue "$dir/dev/mqueue"
	mknod -m 666 "$dir/dev/net/tun" c 10 200
	mknod -m 660 "$dir/dev/loop-control" c 10 237
	for i in 0 1 2 3 4 5 6 7; do mknod -m 660 "$dir/dev/loop$i" b 7 "$i"; done
	ln -s /proc/self/fd "$dir/dev/fd"
	ln -s /proc/self/fd/0 "$dir/dev/stdin"
	ln -s /proc/self/fd/1 "$dir/dev/stdout"
	ln -s /proc/self/fd/2 "$dir/dev/stderr"
	mount -t tmpfs tmpfs "$dir/run"
	mount --bind "$goroot" "$dir/usr/local/go"
	mount -o remount,bind,ro "$dir/usr/local/go"
	exec chroot "$dir" /bin/bash -lc "$3"
' chroot-test "$dir" "$goroot" "export PATH=/usr/local/go/bin:\$PATH GOPROXY='$proxy' GOSUMDB='$sumdb' GOFLAGS='$flags' CI=true; \
	cd /root/vgpu-host && scripts/deps.sh test e2e && \
	{ grep -qx 'namespaces = \[\]' /etc/libvirt/qemu.conf || echo 'namespaces = []' >>/etc/libvirt/qemu.conf; } && \
	${CHROOT_TEST_CMD:-make test}" >"$dir.test.log" 2>&1 ||
	{ tail -n 40 "$dir.test.log" >&2; echo "chroot-test: FAIL: make test (log: $dir.test.log)" >&2; exit 1; }
[ -n "${CHROOT_TEST_CMD:-}" ] || grep -q '^e2e: [0-9]* passed, 0 failed' "$dir.test.log" || { echo "chroot-test: FAIL: no passing e2e summary in $dir.test.log" >&2; exit 1; }
echo "chroot-test: ok: make test as root in a clean Debian 12 chroot in $(( $(date +%s) - start )) s (log: $dir.test.log)"
