#!/usr/bin/env bash
# The Debian package on this machine, end to end (make test-deb; make test runs it): dpkg -i
# the .deb, check that dpkg -L lists every file it ships and they are there, run the installed
# `vgpu-host version` (the helper found beside it, the same build) and `vgpu-host check`, then
# dpkg -r and dpkg --purge it and check that nothing it installed is left. Safe to re-run: a
# vgpu-host package left installed by an earlier, failed run is purged first. Needs root.
# Usage: scripts/test-deb.sh bin/vgpu-host_VERSION_amd64.deb
set -euo pipefail
deb=${1:?usage: $0 PACKAGE.deb}
pkg=vgpu-host
fail() { echo "test-deb: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (dpkg -i)"
[ -f "$deb" ] || fail "$deb missing: run make deb"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

installed() { dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null | grep -qv '^not-installed$'; }
if installed; then
	echo "test-deb: $pkg is installed (an earlier run?): purging it first"
	dpkg --purge "$pkg" >/dev/null
fi

# What the package ships, and which of those paths exist before it is installed (the shared
# directories /usr, /usr/bin, …): only the others must be gone after the purge.
dpkg-deb -c "$deb" | awk '{print substr($6, 2)}' | sed 's#/$##' | grep -v '^$' >"$work/shipped"
while read -r p; do [ -e "$p" ] && echo "$p"; done <"$work/shipped" >"$work/before" || true
grep -vxF -f "$work/before" "$work/shipped" >"$work/new" || true
[ -s "$work/new" ] || fail "every path $deb ships exists already: is vgpu-host installed by other means (make install PREFIX=/usr)?"
state() { { ls -A /var/lib/vgpu-host 2>/dev/null || true; } | wc -l; }
state_before=$(state)

dpkg -i "$deb" >/dev/null
dpkg -L "$pkg" | sed 's#/$##' | sort >"$work/listed"
missing=$(sort "$work/shipped" | comm -23 - "$work/listed")
[ -z "$missing" ] || fail "dpkg -L does not list: $missing"
while read -r p; do [ -e "$p" ] || fail "dpkg -L lists $p but it is not there"; done <"$work/listed"
echo "test-deb: installed $(grep -c . "$work/new") new paths; dpkg -L lists $(wc -l <"$work/listed")"

v=$(/usr/bin/vgpu-host -o json version)
echo "$v" | jq -e '.version != "" and .commit != "" and .helper.found and .helper.path == "/usr/bin/vgpu-host-libvirt" and .helper.matches' >/dev/null ||
	fail "vgpu-host version: the helper is not found beside it or not the same build: $v"
/usr/bin/vgpu-host-nvml --version >/dev/null || fail "the NVML helper /usr/bin/vgpu-host-nvml does not run"
/usr/bin/vgpu-host-agent --version >/dev/null || fail "the agent /usr/bin/vgpu-host-agent does not run"
echo "test-deb: vgpu-host version: $(echo "$v" | jq -c '{version, commit, helper: .helper.matches}')"
rc=0
/usr/bin/vgpu-host check >"$work/check" 2>&1 || rc=$?
# 0: something can be assigned; 3: nothing can (no GPU here). Anything else is a failure.
[ $rc -eq 0 ] || [ $rc -eq 3 ] || { cat "$work/check" >&2; fail "vgpu-host check exited $rc"; }
echo "test-deb: vgpu-host check exited $rc ($(wc -l <"$work/check") lines)"
for u in vgpu-host-restore.service vgpu-host-agent.service; do
	[ -f "/usr/lib/systemd/system/$u" ] || fail "the package does not install $u"
done
grep -qx 'ExecStart=/usr/bin/vgpu-host agent' /usr/lib/systemd/system/vgpu-host-agent.service ||
	fail "vgpu-host-agent.service does not run /usr/bin/vgpu-host agent"
for f in manifest.json index.html index.js index.css; do
	[ -s "/usr/share/cockpit/vgpu-host/$f" ] || fail "the package does not install the Cockpit page's $f"
done
man -w vgpu-host-mdev >/dev/null || fail "man cannot find vgpu-host-mdev(1)"
bash -c '. /usr/share/bash-completion/completions/vgpu-host && complete -p vgpu-host' >/dev/null ||
	fail "the bash completion does not register"

dpkg -r "$pkg" >/dev/null
[ ! -e /usr/bin/vgpu-host ] || fail "dpkg -r left /usr/bin/vgpu-host"
# Without conffiles dpkg -r removes it all; --purge is for what a later version may keep.
! installed || dpkg --purge "$pkg" >/dev/null
! installed || fail "dpkg still knows $pkg after --purge"
left=$(while read -r p; do [ -e "$p" ] && echo "$p"; done <"$work/new" || true)
[ -z "$left" ] || fail "left after purge: $left"
[ "$(state)" = "$state_before" ] || fail "/var/lib/vgpu-host changed"
echo "test-deb: ok: installed, ran version and check, removed and purged; nothing left"
