# shellcheck shell=sh
# Lab baseline numbers, so other benches have a scale: guest boot to init, and the cost of
# starting the binary under TCG (every vgpu-host call in a scenario pays it), beside a bare
# hello-world Go binary's start: the floor any Go tool pays here.
bench lab_boot_to_init_ms "$(awk -v t="$E2E_T0" 'BEGIN {printf "%d", t * 1000}')" ms
n=20
t0=$(now_ms)
i=0
while [ "$i" -lt "$n" ]; do
  vgpu-host --version >/dev/null || fail "vgpu-host --version failed"
  i=$((i + 1))
done
t1=$(now_ms)
bench vgpu_host_version_ms $(((t1 - t0) / n)) ms/op
t2=$(now_ms)
i=0
while [ "$i" -lt "$n" ]; do
  bare-go >/dev/null || fail "bare-go failed"
  i=$((i + 1))
done
t3=$(now_ms)
bench bare_go_start_ms $(((t3 - t2) / n)) ms/op
echo "BENCH process start under TCG: vgpu-host --version $(((t1 - t0) / n)) ms, a bare hello-world Go binary $(((t3 - t2) / n)) ms"
