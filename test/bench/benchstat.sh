#!/usr/bin/env bash
# test/bench/benchstat.sh: the Go benchmarks of two commits side by side
# (issue 28: behaviour unchanged; issue 25: before/after of a data-path
# change). Both commits' test binaries are built first (git worktrees in a
# temporary directory), then run interleaved COUNT times (old, new, old,
# new, ...) so that a drift of the machine falls on both; benchstat
# compares them. Run it alone on the machine: nothing else running, the
# load average is printed at the start and the end.
#
#   COUNT=5 test/bench/benchstat.sh OLD NEW [OUTDIR]
#
# BENCH narrows the benchmarks (go test -bench's regexp, default all), to
# bisect one of them: BENCH='TargetIO/memory/seqwrite/128KiB/qd8' PKGS=target.
#
# OUTDIR (default test/bench/results/benchstat/<date>-<old>-<new>) gets
# old.txt, new.txt (go test -bench output) and benchstat.txt.
# benchstat: go install golang.org/x/perf/cmd/benchstat@latest (or the
# version the module proxy has).
set -euo pipefail
OLD=${1:?usage: benchstat.sh OLD NEW [OUTDIR]}
NEW=${2:?usage: benchstat.sh OLD NEW [OUTDIR]}
COUNT=${COUNT:-5}
BENCHTIME=${BENCHTIME:-1s}
BENCH=${BENCH:-.}
# The packages with benchmarks that run without a cluster (backend's RBD
# benchmark needs one and the rbd tag).
PKGS=${PKGS:-"iwarp nvmeof nvmeof/auth nvmeof/rdma target initiator backend"}
cd "$(dirname "$0")/../.."
root=$(pwd)
BENCHSTAT=${BENCHSTAT:-$(command -v benchstat || echo "$(go env GOPATH)/bin/benchstat")}
[ -x "$BENCHSTAT" ] || { echo "benchstat not found: go install golang.org/x/perf/cmd/benchstat@latest" >&2; exit 2; }
o=$(git rev-parse --short "$OLD") n=$(git rev-parse --short "$NEW")
OUT=${3:-test/bench/results/benchstat/$(date -u +%F)-$o-$n}
mkdir -p "$OUT"
tmp=$(mktemp -d)
cleanup() {
	for v in old new; do git worktree remove --force "$tmp/$v" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
for v in old new; do
	rev=$OLD
	[ "$v" = new ] && rev=$NEW
	git worktree add -q --detach "$tmp/$v" "$rev"
	mkdir -p "$tmp/bin/$v"
	for p in $PKGS; do
		if [ -d "$tmp/$v/$p" ]; then
			(cd "$tmp/$v" && CGO_ENABLED=0 go test -c -o "$tmp/bin/$v/$(echo "$p" | tr / _).test" "./$p")
		fi
	done
done
{
	echo "# benchstat.sh: $(date -u +%FT%TZ), old $o, new $n, count $COUNT, benchtime $BENCHTIME, bench $BENCH, pkgs $PKGS, $(nproc) CPUs, kernel $(uname -r)"
	echo "# load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/run.txt"
: > "$OUT/old.txt"
: > "$OUT/new.txt"
for i in $(seq "$COUNT"); do
	for v in old new; do
		for p in $PKGS; do
			b="$tmp/bin/$v/$(echo "$p" | tr / _).test"
			[ -x "$b" ] || continue
			# Each binary runs in its package's directory (testdata).
			(cd "$tmp/$v/$p" && "$b" -test.run '^$' -test.bench "$BENCH" -test.benchmem -test.benchtime "$BENCHTIME" -test.count 1) |
				grep -E '^(Benchmark|goos|goarch|pkg|cpu)' >> "$OUT/$v.txt" || true
		done
	done
	echo "# round $i done, load average $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/run.txt"
done
echo "# load average at end $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/run.txt"
"$BENCHSTAT" "$OUT/old.txt" "$OUT/new.txt" | tee "$OUT/benchstat.txt"
echo "results in $OUT"
