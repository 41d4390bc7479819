# Shared by bench/*.sh. Speed is measured, not asserted: a missed goal is reported, not a
# failure, unless BENCH_STRICT=1. A bench fails (non-zero) only when it cannot measure.

# goal NAME VALUE OP TARGET [DETAIL]: prints "GOAL NAME: VALUE (goal OP TARGET) met|MISSED"
# (and "; DETAIL") and, with BENCH_STRICT=1, returns 1 when missed. OP is <= or >=. bench/run.sh
# gathers these lines into its summary.
goal() {
	local name=$1 value=$2 op=$3 target=$4 detail=${5:-} verdict
	if awk -v v="$value" -v t="$target" -v op="$op" 'BEGIN { exit !((op == "<=" && v <= t) || (op == ">=" && v >= t)) }'; then
		verdict=met
	else
		verdict=MISSED
	fi
	echo "GOAL $name: $value (goal $op $target) $verdict${detail:+; $detail}"
	[ "$verdict" = met ] || [ -z "${BENCH_STRICT:-}" ]
}

# installed SRC DIR: installs SRC into DIR with install(1), as `make install` and the .deb put
# binaries on a host, and prints the new path. Every binary a bench starts is measured that
# way, its peers too: the Go linker writes its output through mmap, and a binary started
# straight from the linker's output ran ~18% more CPU here (vgpu-host --version; ~7% for a
# bare hello world) than the same bytes written by install(1), until the page cache dropped it
# (Linux 6.18, 300 alternated runs).
installed() {
	install -m 0755 "$1" "$2/" && echo "$2/$(basename "$1")"
}

# summaryRows are issue #32's table, in its order: "figure => regexp of the GOAL names that
# measure it". A goal line matching no row is listed after them, under "other goals".
summaryRows=(
	"inspect / lspci -nnk, the two real-kernel snapshots => ^inspect-vs-lspci-snapshot-"
	"inspect / lspci -nnk, generated 64-GPU host => ^inspect-vs-lspci-gpu64$"
	"--version, --help / a bare Go binary (CPU) => ^start-(version|help)-vs-bare-go$"
	"render, the examples' mix (domains/s, one core) => ^render-domains-per-second$"
	"bind+unbind in the lab: own cost = ratio - bare-Go floor => ^bind[+]unbind-own-cost$"
	"16 mdev create+remove in the lab: own cost; mdevctl/vgpu-host => ^(mdev-create[+]remove-own-cost|mdevctl-over-vgpu-host-mdev)$"
	"apply / virsh define, CLI and through the agent => ^apply-(vs|through-agent-vs)-virsh-define$"
	"apply+destroy at 1,000 and 10,000 VMs / at 10 => ^apply[+]destroy-growth-"
)

# summary LOG: one table of every row of summaryRows with the GOAL lines of LOG that measure
# it ("not measured" when none did: its bench failed or was skipped), then the other goals,
# then how many were met.
summary() {
	local rows
	rows=$(printf '%s\n' "${summaryRows[@]}")
	echo "== summary: issue #32's table from this run (load average now $(cut -d' ' -f1-3 /proc/loadavg))"
	awk -v rows="$rows" '
	BEGIN { n = split(rows, r, "\n"); for (i = 1; i <= n; i++) { split(r[i], f, " => "); label[i] = f[1]; re[i] = f[2] } }
	/^GOAL / {
		# GOAL NAME: VALUE (goal OP TARGET) VERDICT[; DETAIL]
		name = $2; sub(/:$/, "", name)
		line = $0; sub(/^GOAL [^ ]+ /, "", line)
		value = $3; op = $5; target = $6; sub(/\)$/, "", target); verdict = $7; sub(/;$/, "", verdict)
		detail = ""; if (index(line, "; ")) { detail = substr(line, index(line, "; ") + 2) }
		row = 0; for (i = 1; i <= n; i++) if (name ~ re[i]) { row = i; break }
		k = ++count[row]; g[row, k] = sprintf("%-44s %10s  %-2s %-7s %-6s %s", name, value, op, target, verdict, detail)
		if (verdict == "met") met++; total++
	}
	END {
		printf "%-62s | %-44s %10s  %-10s %-6s %s\n", "figure", "goal line", "measured", "goal", "", "detail"
		for (i = 1; i <= n; i++) {
			if (!count[i]) { printf "%-62s | %s\n", label[i], "not measured (its bench failed or was skipped: see above)"; continue }
			for (k = 1; k <= count[i]; k++) printf "%-62s | %s\n", (k == 1 ? label[i] : ""), g[i, k]
		}
		for (k = 1; k <= count[0]; k++) printf "%-62s | %s\n", (k == 1 ? "other goals" : ""), g[0, k]
		printf "%d of %d goals met\n", met, total
	}' "$1"
}
