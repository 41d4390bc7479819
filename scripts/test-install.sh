#!/usr/bin/env bash
# make install into a temporary DESTDIR puts exactly the expected files there (both binaries,
# the systemd unit pointing at the installed binary, bash/zsh/fish completions, a man page per
# command that man formats without warnings), and make uninstall removes them all. Needs no
# root. make test-install runs it; make test runs that.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "test-install: FAIL: $*" >&2; exit 1; }
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
prefix=/opt/vgpu-test
make --no-print-directory -s install DESTDIR="$dest" PREFIX="$prefix" >/dev/null

# Expected: the man pages follow the command tree (one per visible command).
cmds=$(bin/vgpu-host --generate-shell-completion | cut -d: -f1 | grep -vx 'help\|h' | sort)
{
	printf '%s\n' bin/vgpu-host bin/vgpu-host-libvirt lib/systemd/system/vgpu-host-restore.service lib/systemd/system/vgpu-host-agent.service \
		share/bash-completion/completions/vgpu-host share/zsh/site-functions/_vgpu-host \
		share/fish/vendor_completions.d/vgpu-host.fish share/man/man1/vgpu-host.1
	for c in $cmds; do echo "share/man/man1/vgpu-host-$c.1"; done
	echo bin/vgpu-host-nvml # the NVML (MIG) helper
	echo bin/vgpu-host-agent # the agent (the command tree with metrics, reconcile, drift)
	# the Cockpit page: what make cockpit built, with its manifest
	(cd cockpit/dist && find . -type f | sed 's#^\./#share/cockpit/vgpu-host/#')
} | sed "s#^#$prefix/#" | sort >"$dest.want"
(cd "$dest" && find . -type f -o -type l | sed 's#^\.##' | sort) >"$dest.got"
diff -u "$dest.want" "$dest.got" >&2 || { rm -f "$dest.want" "$dest.got"; fail "make install DESTDIR=... PREFIX=$prefix did not install exactly the expected files"; }
# The CLI carries its runtime defaults (cmd/vgpu-host/godebug.default, linked in by make
# build-static; TestGodebugDefaultNoHugePages proves what they do).
godebug=$(cat cmd/vgpu-host/godebug.default)
grep -qaF "$godebug" "$dest$prefix/bin/vgpu-host" || fail "$prefix/bin/vgpu-host does not carry its runtime defaults ($godebug, cmd/vgpu-host/godebug.default): the Makefile's CLI_BUILDFLAGS lost -X runtime.godebugDefault"
n=$(wc -l <"$dest.got")
rm -f "$dest.want" "$dest.got"

jq -e '.menu.index.label == "GPUs" and .config.socket == "/run/vgpu-host/agent.sock"' "$dest$prefix/share/cockpit/vgpu-host/manifest.json" >/dev/null ||
	fail "the installed Cockpit manifest does not name the page GPUs and the agent's socket"
grep -q '../base1/cockpit.js' "$dest$prefix/share/cockpit/vgpu-host/index.html" || fail "the installed page does not load Cockpit's cockpit.js"
grep -qx "ExecStart=$prefix/bin/vgpu-host host restore" "$dest$prefix/lib/systemd/system/vgpu-host-restore.service" ||
	fail "the installed unit does not run $prefix/bin/vgpu-host"
agent_unit="$dest$prefix/lib/systemd/system/vgpu-host-agent.service"
grep -qx "ExecStart=$prefix/bin/vgpu-host agent" "$agent_unit" || fail "the installed agent unit does not run $prefix/bin/vgpu-host agent"
for l in Type=notify Conflicts=vgpu-host-restore.service RuntimeDirectory=vgpu-host 'Before=libvirtd.service virtqemud.service libvirt-guests.service'; do
	grep -qx "$l" "$agent_unit" || fail "the installed agent unit lacks $l"
done
# systemd's own parser: no unknown key or bad value (the binary need not exist for this check).
if command -v systemd-analyze >/dev/null; then
	w=$(systemd-analyze verify --man=no "$agent_unit" 2>&1 | grep -E "$(basename "$agent_unit")" | grep -v 'Command .* is not executable\|not found' || true)
	[ -z "$w" ] || fail "systemd-analyze verify $agent_unit: $w"
fi
"$dest$prefix/bin/vgpu-host" -o json version | jq -e '.helper.found and .helper.matches' >/dev/null ||
	fail "the installed vgpu-host does not find the helper installed beside it"
for p in "$dest$prefix"/share/man/man1/*.1; do
	w=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$p" 2>&1 >/dev/null) || fail "man -l $p failed: $w"
	[ -z "$w" ] || fail "man --warnings -l $p: $w"
done
# The installed bash completion, with bash-completion loaded as a login shell has it, completes
# a command, a subcommand and a flag by asking the installed binary.
complete_bash() { # complete_bash WORD... : what TAB offers for the last word
	PATH="$dest$prefix/bin:$PATH" bash -c '. /usr/share/bash-completion/bash_completion
		. "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
		__vgpu-host_bash_autocomplete vgpu-host "${!#}" "${COMP_WORDS[COMP_CWORD-1]}"; echo "${COMPREPLY[*]}"' \
		"$dest$prefix/share/bash-completion/completions/vgpu-host" vgpu-host "$@"
}
for c in "md:mdev" "mdev cr:create" "mdev create --pa:--parent"; do
	got=$(complete_bash ${c%%:*} 2>&1)
	[ "$got" = "${c#*:}" ] || fail "bash completion of 'vgpu-host ${c%%:*}' gives '$got', want '${c#*:}'"
done

make --no-print-directory -s uninstall DESTDIR="$dest" PREFIX="$prefix" >/dev/null
left=$(cd "$dest" && find . -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left: $left"
echo "test-install: ok: make install put $n files under DESTDIR$prefix (binaries, restore and agent units, 3 completions, bash completing from the binary, man pages that man formats without warnings, the Cockpit page); make uninstall removed them"
