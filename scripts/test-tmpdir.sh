#!/usr/bin/env bash
# test-tmpdir.sh CMD [ARGS...]: run CMD (go test) with TMPDIR=/dev/shm when that is a memory
# file system fit for it, else with TMPDIR as it is.
#
# Why: vgpu-host's tests build fake host trees (sysfs, procfs, /var/lib) of thousands of small
# files and links under t.TempDir(), and go test links its test binaries under TMPDIR. On a
# disk that costs more system time than the tests themselves: `make test-unit` took 170 s wall
# (162 s of system time) with TMPDIR on this machine's ext4 disk and 81 s (51 s) on /dev/shm,
# the same tests passing (2026-11-26, 2 cores). Nothing a test checks depends on the file
# system type; the tests that need a disk's behaviour (a full disk) build it themselves.
#
# /dev/shm is used as /tmp is (go test and t.TempDir make their own private directories in it)
# only when all of these hold:
#   - TMPDIR is not set already (a developer's choice wins);
#   - /dev/shm is a tmpfs, writable, sticky (mode 1777, as /tmp: nobody removes another's
#     files), not mounted noexec (tests run the binaries they build);
#   - it has at least 2 GiB free.
# No directory of our own in between: the tests' unix sockets live under t.TempDir(), and a
# longer prefix than /dev/shm's 8 characters would put the longest of them past the kernel's
# 108-byte limit for a socket path (seen: "bind: invalid argument" with a 32-character prefix).
set -uo pipefail
[ $# -gt 0 ] || { echo "usage: scripts/test-tmpdir.sh CMD [ARGS...]" >&2; exit 2; }

shm=/dev/shm
use_shm() {
	[ -z "${TMPDIR:-}" ] || return 1
	[ "$(stat -f -c %T "$shm" 2>/dev/null)" = tmpfs ] || return 1
	[ -d "$shm" ] && [ ! -L "$shm" ] && [ -w "$shm" ] && [ -k "$shm" ] || return 1
	grep -qE "^[^ ]+ $shm [^ ]+ ([^ ]*,)?noexec" /proc/mounts && return 1
	local free
	free=$(df -P -k "$shm" 2>/dev/null | awk 'NR == 2 { print $4 }')
	[ -n "$free" ] && [ "$free" -ge $((2 * 1024 * 1024)) ]
}

if use_shm; then
	echo "scripts/test-tmpdir.sh: TMPDIR=$shm (a tmpfs)" >&2
	export TMPDIR=$shm
	# libguestfs (the image bake's virt-sysprep) keeps its appliance cache, hundreds of MiB
	# reused from run to run, under TMPDIR when LIBGUESTFS_CACHEDIR is unset: keep it where it
	# was without TMPDIR, on the disk, not in memory.
	export LIBGUESTFS_CACHEDIR=${LIBGUESTFS_CACHEDIR:-/var/tmp}
fi
exec "$@"
