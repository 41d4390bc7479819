# shellcheck shell=sh disable=SC2012 # ls on sysfs: names are plain
# Assertion library for lab scenarios (busybox sh inside the guest; sourced by init before each
# scenario, so scenarios just call these). Every check prints one line:
#   PASS <scenario>: <what>
#   FAIL <scenario>: <what>
#        <indented context: expected/actual, command output>
# and returns 0 on pass, 1 on failure, so a scenario can guard follow-up checks with `|| return`.
# Checks never exit: a scenario keeps going after a failure and the summary counts them all.
#
# Environment a scenario sees: E2E_SCENARIO (file name without .sh), E2E_MODE (test|bench|
# snapshot), E2E_KVER (uname -r), E2E_T0 (uptime seconds when init started), the LAB_* device
# addresses from lab.env, PATH with busybox applets and /bin/vgpu-host. Working dir: /tmp.

E2E_RESULTS=${E2E_RESULTS:-/tmp/e2e-results}
E2E_SCENARIO=${E2E_SCENARIO:-adhoc}

_e2e_record() { # _e2e_record PASS|FAIL|SKIP MSG [CONTEXT]
  echo "$1 $E2E_SCENARIO: $2"
  [ -z "${3:-}" ] || printf '%s\n' "$3" | sed 's/^/     /'
  echo "$1 $E2E_SCENARIO: $2" >>"$E2E_RESULTS"
}

# pass MSG / fail MSG [CONTEXT] / skip MSG: record a result directly.
pass() { _e2e_record PASS "$1"; }
fail() { _e2e_record FAIL "$1" "${2:-}"; return 1; }
skip() { _e2e_record SKIP "$1"; }
# note MSG: informational line, not counted.
note() { echo "  .. $E2E_SCENARIO: $*"; }

# expect_eq ACTUAL EXPECTED MSG
expect_eq() {
  if [ "$1" = "$2" ]; then pass "$3 ($1)"; else fail "$3" "expected: '$2'
actual:   '$1'"; fi
}
# expect_ne ACTUAL UNEXPECTED MSG
expect_ne() {
  if [ "$1" != "$2" ]; then pass "$3 ($1)"; else fail "$3" "expected anything but '$2'"; fi
}
# expect_match TEXT ERE MSG: TEXT matches the extended regular expression (grep -E).
expect_match() {
  if printf '%s\n' "$1" | grep -Eq -- "$2"; then pass "$3"; else fail "$3" "pattern: $2
text:
$1"; fi
}
# expect_gt NUMBER MIN MSG: NUMBER > MIN (integers).
expect_gt() {
  if [ "$1" -gt "$2" ] 2>/dev/null; then pass "$3 ($1 > $2)"; else fail "$3" "expected > $2, got '$1'"; fi
}
# expect_file PATH [MSG]: PATH exists (file, directory, device or symlink target).
expect_file() {
  if [ -e "$1" ]; then pass "${2:-exists: $1}"; else fail "${2:-exists: $1}" "missing: $1"; fi
}
# expect_no_file PATH [MSG]
expect_no_file() {
  if [ ! -e "$1" ] && [ ! -L "$1" ]; then pass "${2:-absent: $1}"; else fail "${2:-absent: $1}" "present: $1"; fi
}
# expect_content PATH EXPECTED [MSG]: the file's content (trailing newline trimmed) is EXPECTED.
expect_content() {
  if [ ! -e "$1" ]; then fail "${3:-$1 = $2}" "missing: $1"; return; fi
  expect_eq "$(cat "$1" 2>&1)" "$2" "${3:-$1}"
}
# expect_link PATH NAME [MSG]: PATH is a symlink whose target's last component is NAME;
# NAME "-" means PATH must not exist (e.g. no driver).
expect_link() {
  _t=$(readlink "$1" 2>/dev/null) || _t=-
  [ "$_t" = - ] || _t=${_t##*/}
  expect_eq "$_t" "$2" "${3:-$1 -> $2}"
}
# expect_driver ADDR DRIVER [MSG]: PCI device ADDR is bound to DRIVER ("-" for no driver).
expect_driver() { expect_link "/sys/bus/pci/devices/$1/driver" "$2" "${3:-driver of $1 is $2}"; }

# run_ok CMD...: CMD exits 0. run_fails CMD...: CMD exits non-zero.
# Both leave the combined stdout+stderr in $E2E_OUT (a file) and the status in $E2E_RC.
E2E_OUT=/tmp/e2e-out
run_ok() {
  E2E_RC=0
  "$@" >"$E2E_OUT" 2>&1 || E2E_RC=$?
  if [ "$E2E_RC" -eq 0 ]; then pass "run: $*"; else fail "run: $*" "exit status $E2E_RC, output:
$(tail -n 30 "$E2E_OUT")"; fi
}
run_fails() {
  E2E_RC=0
  "$@" >"$E2E_OUT" 2>&1 || E2E_RC=$?
  if [ "$E2E_RC" -ne 0 ]; then pass "fails as expected ($E2E_RC): $*"; else fail "expected failure: $*" "exit status 0, output:
$(tail -n 30 "$E2E_OUT")"; fi
}
# write_ok PATH VALUE [MSG]: writing VALUE to the sysfs attribute PATH succeeds.
# write_fails PATH VALUE [MSG]: the write is refused (EBUSY, EINVAL, ...); the error is in output.
write_ok() {
  E2E_RC=0
  (echo "$2" >"$1") >"$E2E_OUT" 2>&1 || E2E_RC=$?
  if [ "$E2E_RC" -eq 0 ]; then pass "${3:-write $2 > $1}"; else fail "${3:-write $2 > $1}" "$(cat "$E2E_OUT")"; fi
}
write_fails() {
  E2E_RC=0
  (echo "$2" >"$1") >"$E2E_OUT" 2>&1 || E2E_RC=$?
  if [ "$E2E_RC" -ne 0 ]; then pass "${3:-write $2 > $1 refused}: $(cat "$E2E_OUT")"; else fail "${3:-write $2 > $1 refused}" "the write succeeded"; fi
}
# output: the last run_ok/run_fails/write_ok/write_fails output.
output() { cat "$E2E_OUT"; }

# wait_for SECONDS CMD...: poll CMD every 0.1 s until it succeeds; returns 1 on timeout (no
# result recorded: wrap it in a check, e.g. `wait_for 5 test -e X || fail "X never appeared"`).
wait_for() {
  _n=$(($1 * 10))
  shift
  while [ "$_n" -gt 0 ]; do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
    _n=$((_n - 1))
  done
  return 1
}

# hold_open NODE: starts a process (sleep, for up to 10 minutes) that holds the device node NODE
# open, as a guest's QEMU or a desktop's sound server would, and sets holder to its pid once
# its descriptor is open. release_hold ends it.
hold_open() {
  # shellcheck disable=SC2217 # the point is the open fd, not reading it
  sleep 600 <"$1" &
  holder=$!
  wait_for 5 test -e "/proc/$holder/fd/0" || note "holder of $1 not started"
}
release_hold() {
  kill "$holder" 2>/dev/null
  wait "$holder" 2>/dev/null
}

# alsa_card ADDR: the number of the ALSA card of function ADDR (its sound/cardN in sysfs, the
# HDMI audio function's under snd_hda_intel); nothing when it has none.
alsa_card() {
  for _d in "/sys/bus/pci/devices/$1"/sound/card[0-9]*; do
    [ -e "$_d" ] && echo "${_d##*/card}" && return
  done
}

# new_uuid: a random UUID (for mdev instances; busybox has no uuidgen).
new_uuid() { cat /proc/sys/kernel/random/uuid; }

# gpu_vm_spec NAME ADDR [SPEC_LINE...]: prints a small VM spec that passes the GPU at ADDR
# through (1 vCPU, 256 MiB, BIOS, VNC, no network); each SPEC_LINE ("numa: auto") is added
# under spec:.
gpu_vm_spec() {
  _name=$1 _addr=$2
  shift 2
  printf 'apiVersion: vgpu-host/v1\nkind: VirtualMachine\nmetadata:\n  name: %s\nspec:\n' "$_name"
  for _l in "$@"; do printf '  %s\n' "$_l"; done
  printf '  vcpus: 1\n  memory: 256MiB\n  firmware: bios\n  graphics:\n    type: vnc\n  network:\n    type: none\n'
  printf '  gpus:\n    - passthrough:\n        address: "%s"\n' "$_addr"
}

# Small sysfs helpers.
pci_dev() { echo "/sys/bus/pci/devices/$1"; }
# group_of ADDR: the IOMMU group number of a PCI device (empty when it has none).
group_of() { _g=$(readlink "/sys/bus/pci/devices/$1/iommu_group" 2>/dev/null) && echo "${_g##*/}"; }
# group_members N: the devices of IOMMU group N, one per line, sorted.
group_members() { ls "/sys/kernel/iommu_groups/$1/devices" 2>/dev/null | sort; }
# driver_of ADDR: the bound driver's name, or "-".
driver_of() { _d=$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null) && echo "${_d##*/}" || echo -; }

# Benchmarks (test/e2e/bench/*.sh): now_ms prints a millisecond clock; bench NAME VALUE UNIT
# prints "BENCH NAME VALUE UNIT", which run.sh --bench passes through.
now_ms() {
  _ns=$(date +%s%N 2>/dev/null)
  case $_ns in *N | "") awk '{printf "%d\n", $1 * 1000}' /proc/uptime ;; *) echo $((_ns / 1000000)) ;; esac
}
bench() { echo "BENCH $1 $2 ${3:-}"; }
# time_starts: the process starts a lab bench's floor and split subtract, timed in the round
# they are subtracted from: two `vgpu-host --version` (starts_ms) and two starts of the bare
# hello-world Go binary (bare_ms); ends with now_ms in done_ms.
time_starts() {
  _t0=$(now_ms)
  vgpu-host --version >/dev/null
  vgpu-host --version >/dev/null
  _t1=$(now_ms)
  bare-go >/dev/null
  bare-go >/dev/null
  done_ms=$(now_ms)
  starts_ms=$((_t1 - _t0)) bare_ms=$((done_ms - _t1))
}

# request_reboot: reboot the guest (a real `reboot`: QEMU resets the machine, the same kernel
# and initramfs boot again, the persistent disk keeps /etc and /var/lib) once every scenario of
# this boot has run; init then runs this scenario again with E2E_BOOT=2, and nothing else.
# Scenarios branch on E2E_BOOT. Needs the persistent disk (test mode).
request_reboot() {
  if [ -z "${E2E_PERSIST:-}" ]; then
    fail "request_reboot: no persistent disk (/dev/vda is not mounted on /persist)"
    return 1
  fi
  echo "$E2E_SCENARIO" >>"$E2E_PERSIST/resume"
  note "reboot requested: after this boot's scenarios the guest reboots and runs $E2E_SCENARIO again (E2E_BOOT=2)"
}
