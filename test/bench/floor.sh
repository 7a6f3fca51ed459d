#!/usr/bin/env bash
# test/bench/floor.sh: the sleeping data path's physical floor on this machine
# (issue 25): test/bench/floor's two processes, pinned one core each
# (GOMAXPROCS=1), ping-pong one 4 KiB NVMe/TCP read's bytes over loopback,
# ROUNDS times per mode, interleaved; prints one JSON line per run and the
# medians. Run it alone on the machine.
#
#   ROUNDS=5 N=200000 test/bench/floor.sh > test/bench/results/perf/floor.txt
set -euo pipefail
ROUNDS=${ROUNDS:-5}
N=${N:-200000}
PORT=${PORT:-4599}
TGT_CPU=${TGT_CPU:-0}
INI_CPU=${INI_CPU:-1}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'kill $srv 2>/dev/null || true; rm -rf "$tmp"' EXIT
srv=
CGO_ENABLED=0 go build -o "$tmp/floor" ./test/bench/floor
echo "# floor: $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs, kernel $(uname -r), commit $(git rev-parse --short HEAD)"
for r in $(seq "$ROUNDS"); do
	for mode in syscall netpoll; do
		taskset -c "$TGT_CPU" env GOMAXPROCS=1 "$tmp/floor" serve -addr "127.0.0.1:$PORT" -mode "$mode" &
		srv=$!
		taskset -c "$INI_CPU" env GOMAXPROCS=1 "$tmp/floor" ping -addr "127.0.0.1:$PORT" -mode "$mode" -n "$N" | tee -a "$tmp/out.jsonl"
		kill "$srv"; wait "$srv" 2>/dev/null || true; srv=
	done
done
echo "# load average at end $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$tmp/out.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for mode in ("syscall", "netpoll"):
    rs = [r for r in rows if r["mode"] == mode]
    m = lambda k: statistics.median(r[k] for r in rs)
    print(f"# median of {len(rs)} runs, {mode}: p50 {m('p50_us'):.1f} us, p99 {m('p99_us'):.1f} us, p99.9 {m('p99_9_us'):.1f} us, {m('iops'):.0f} round trips/s")
PY
