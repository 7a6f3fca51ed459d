#!/usr/bin/env bash
# test/bench/loopback.sh: nvmetd and `nvmeof bench` over loopback, the figures
# of the README's Benchmarks section.
#
#   make build && test/bench/loopback.sh [options]
#
# Environment:
#   BIN=bin             where nvmetd and nvmeof are (make build)
#   PORT=4520           the port nvmetd listens on (127.0.0.1)
#   PIN=1               nvmetd on CPU 0, nvmeof on CPU 1, GOMAXPROCS=1 each
#                       (one core a side); PIN=0: both share every CPU
#   BP=50us             busy polling on both sides (transport.busy_poll and
#                       --busy-poll); 0s: off
#   HBP=$BP             the host's busy polling alone (BP=0s HBP=50us: the
#                       target sleeps, the host spins, as SPDK's interrupt
#                       mode with spdk_nvme_perf)
#   NSS="1 2"           namespaces: 1 null (8 GiB), 2 file (2 GiB, written
#                       fully first so that reads hit data)
#   LOADS="qd1 qd64 w64 r128 w128"
#                       4 KiB randread QD1 and QD64, 4 KiB randwrite QD64,
#                       128 KiB sequential read and write QD16
#   NOFILL=0            1: the null namespace leaves read buffers untouched
#                       (backend no_fill), as SPDK's null bdev
#   DIRECT=0            1: the file namespace bypasses the page cache
#                       (O_DIRECT: every command goes to a backend worker)
#   WARM=1              read the file namespace's image whole before each of
#                       its loads, so that its page cache is complete (a
#                       machine may reclaim cold page cache meanwhile: this
#                       one runs DAMON's proactive reclaim); each file load
#                       prints the image's resident share before it and the
#                       page-cache hits and misses of its reads and writes
#                       (the namespace's backend stats); 0: no warming
#   KBOUND=0            1: with the file namespace, first time the kernel's own
#                       4 KiB random reads of its image from the page cache
#                       (fio, pvsync2 = preadv2, one job on the target's CPU,
#                       for $RT): the file namespace's QD64 IOPS cannot pass
#                       1 / (1/null + 1/that), the null namespace's I/O plus
#                       the kernel's read
#   IOW=                tuning.io_workers (the backend workers); empty: the
#                       default
#   SOCKBUF=            SO_SNDBUF/SO_RCVBUF of both sides ("2MiB", as SPDK
#                       sets); empty: the kernel's default
#   RT=10s              runtime of each load
#   ROUNDS=1            how many times the whole set runs
#   Q=1                 I/O queues
#   COUNT=0             1: count what each I/O costs on each side instead of
#                       only timing it: system calls by kind, context
#                       switches and wake-ups (perf stat on each process),
#                       goroutine schedulings, lock acquisitions and heap
#                       allocations (binaries built here with -tags
#                       perfcount; see internal/perfcount). Needs perf
#                       (Debian: linux-perf) and go. The counted build is
#                       slower (about 10 ns a lock): time with COUNT=0.
#   METRICS=0           1: metered against unmetered: every load runs twice
#                       in a row, once with the metrics endpoint configured
#                       (metrics.address 127.0.0.1:$MPORT) and scraped every
#                       $SCRAPE, once without it (switched by SIGHUP; the
#                       order alternates from round to round); prints each
#                       pair's IOPS and their ratio, and at the end the
#                       geometric mean of the ratios per load and overall
#   MPORT=9479          the metrics endpoint's port (METRICS=1)
#   SCRAPE=1s           time between scrapes (Prometheus's default is 15s;
#                       METRICS=1)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-bin}
PORT=${PORT:-4520}
PIN=${PIN:-1}
BP=${BP:-50us}
HBP=${HBP:-$BP}
NSS=${NSS:-1 2}
LOADS=${LOADS:-qd1 qd64 w64 r128 w128}
RT=${RT:-10s}
ROUNDS=${ROUNDS:-1}
Q=${Q:-1}
COUNT=${COUNT:-0}
NOFILL=${NOFILL:-0}
DIRECT=${DIRECT:-0}
WARM=${WARM:-1}
SOCKBUF=${SOCKBUF:-}
IOW=${IOW:-}
KBOUND=${KBOUND:-0}
METRICS=${METRICS:-0}
MPORT=${MPORT:-9479}
SCRAPE=${SCRAPE:-1s}
NQN=nqn.2024-01.io.nvmetd:bench
if ss -Hltn "sport = :$PORT" | grep -q .; then echo "port $PORT is in use" >&2; exit 1; fi

D=$(mktemp -d)
if [ "$COUNT" = 1 ]; then
	command -v perf >/dev/null || { echo "COUNT=1 needs perf (apt-get install linux-perf)" >&2; exit 1; }
	go build -tags perfcount -o "$D/bin/" ./cmd/nvmetd ./cmd/nvmeof
	go build -o "$D/countreport" ./test/bench/countreport
	BIN=$D/bin
	: >"$D/target.count"
	read -r -a PERFEV <<<"$("$D/countreport" -events)"
fi
[ -x "$BIN/nvmetd" ] && [ -x "$BIN/nvmeof" ] || { echo "no $BIN/nvmetd or $BIN/nvmeof: run make build" >&2; exit 1; }
cat > "$D/nvmetd.yaml" <<Y
daemon:
  log_level: warn
  log_format: console
  control_socket: $D/nvmetd.sock
ports:
  - id: 1
    address: 127.0.0.1
    service_id: $PORT
    subsystems: [$NQN]
transport:
  busy_poll: $BP
$( [ -n "$SOCKBUF" ] && printf '  socket_send_buffer: %s\n  socket_receive_buffer: %s\n' "$SOCKBUF" "$SOCKBUF" )
$( [ -n "$IOW" ] && printf 'tuning:\n  io_workers: %s\n' "$IOW" )
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: {kind: "null", size: 8GiB$( [ "$NOFILL" = 1 ] && echo ", no_fill: true" )}
      - nsid: 2
        backend: {kind: file, path: $D/ns2.img, size: 2GiB$( [ "$DIRECT" = 1 ] && echo ", direct: true" )}
Y
if [ "$METRICS" = 1 ]; then
	[ "$COUNT" = 1 ] && { echo "METRICS=1 times the loads: it does not go with COUNT=1" >&2; exit 1; }
	command -v curl >/dev/null || { echo "METRICS=1 needs curl" >&2; exit 1; }
	if ss -Hltn "sport = :$MPORT" | grep -q .; then echo "port $MPORT is in use" >&2; exit 1; fi
	cp "$D/nvmetd.yaml" "$D/unmetered.yaml"
	{ cat "$D/unmetered.yaml"; printf 'metrics:\n  address: 127.0.0.1:%s\n' "$MPORT"; } >"$D/metered.yaml"
fi
case " $NSS " in *" 2 "*) dd if=/dev/urandom of="$D/ns2.img" bs=1M count=2048 status=none ;; esac
run0=() run1=()
if [ "$PIN" = 1 ]; then
	run0=(taskset -c 0 env GOMAXPROCS=1)
	run1=(taskset -c 1 env GOMAXPROCS=1)
fi
if [ "$KBOUND" = 1 ]; then
	case " $NSS " in *" 1 2 "*) ;; *) echo "KBOUND=1 needs both namespaces, null first (NSS=\"1 2\")" >&2; exit 1 ;; esac
	case " $LOADS " in *" qd64 "*) ;; *) echo "KBOUND=1 needs the qd64 load" >&2; exit 1 ;; esac
	command -v fio >/dev/null || { echo "KBOUND=1 needs fio" >&2; exit 1; }
fi
# kbound times the kernel's own 4 KiB random reads of the file namespace's
# image from the page cache on the target's CPU (KBOUND=1) into $kb.
kbound() {
	cat "$D/ns2.img" >/dev/null
	# --invalidate=0: fio drops the file's page cache before it starts
	# otherwise.
	kb=$("${run0[@]}" fio --name=kbound --filename="$D/ns2.img" --invalidate=0 --rw=randread --bs=4k \
		--ioengine=pvsync2 --norandommap --size=2g --time_based --runtime="$RT" --output-format=json |
		python3 -c 'import json, sys; print(round(json.load(sys.stdin)["jobs"][0]["read"]["iops"]))')
	echo "== kernel: fio preadv2 alone, 4 KiB random reads of the image from the page cache on the target's CPU: $kb IOPS ($(awk -v k="$kb" 'BEGIN{printf "%.2f", 1e6 / k}') µs a read)"
}
NVMETD_PERFCOUNT=$D/target.count "${run0[@]}" "$BIN/nvmetd" --config "$D/nvmetd.yaml" >"$D/nvmetd.log" 2>&1 &
tgt=$!
trap 'kill $tgt 2>/dev/null; wait $tgt 2>/dev/null; rm -rf "$D"' EXIT
until ss -Hltn "sport = :$PORT" | grep -q .; do
	kill -0 $tgt 2>/dev/null || { cat "$D/nvmetd.log" >&2; exit 1; }
	sleep 0.1
done
echo "# $(date -u +%FT%TZ) $(nproc) CPUs, PIN=$PIN BP=$BP HBP=$HBP NOFILL=$NOFILL DIRECT=$DIRECT IOW=$IOW SOCKBUF=$SOCKBUF Q=$Q RT=$RT COUNT=$COUNT, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), load $(cut -d' ' -f1-3 /proc/loadavg)"
# snap asks the target for its perfcount counts since the last snap.
snap() {
	local n
	n=$(wc -l <"$D/target.count" 2>/dev/null || echo 0)
	kill -USR2 $tgt
	for _ in $(seq 100); do
		[ "$(wc -l <"$D/target.count" 2>/dev/null || echo 0)" -gt "$n" ] && return
		sleep 0.05
	done
	echo "no perfcount answer from nvmetd" >&2
}
ctxsw() { awk '/^voluntary_ctxt/{v+=$2} /^nonvoluntary_ctxt/{n+=$2} END{print v+0, n+0}' /proc/$tgt/task/*/status 2>/dev/null; }
# nowait prints the file namespace's backend stats: "done missed".
nowait() {
	"$BIN/nvmetd" status --socket "$D/nvmetd.sock" -o json | python3 -c '
import json, sys
for sub in json.load(sys.stdin)["target"]["subsystems"]:
    for ns in sub["namespaces"]:
        if ns["nsid"] == 2:
            st = ns["backend"].get("stats") or {}
            print(st.get("nowait_done", 0), st.get("nowait_missed", 0))'
}
bench() {
	echo "== nsid $1: ${*:2}"
	if [ "$1" = 2 ] && [ "$DIRECT" != 1 ]; then
		[ "$WARM" = 1 ] && cat "$D/ns2.img" >/dev/null
		local res n0 n1
		res=$(command -v fincore >/dev/null && fincore -nb -o RES "$D/ns2.img" | awk -v s=$((2 << 30)) '{printf "%.1f %%", 100 * $1 / s}' || echo "?")
		n0=$(nowait)
		bench2 "$@"
		n1=$(nowait)
		echo "$n0 $n1" | awk -v r="$res" '{d = $3 - $1; m = $4 - $2; if (d + m > 0) printf "  page cache: %s of the image resident before; %d served at once (RWF_NOWAIT), %d missed (%.2f %%)\n", r, d, m, 100 * m / (d + m); else printf "  page cache: %s of the image resident before; no RWF_NOWAIT tries (declined by the file system for this kind: every command went to a worker)\n", r}'
		return
	fi
	bench2 "$@"
}
bench2() {
	local cmd=("${run1[@]}" "$BIN/nvmeof" bench -t rdma -a 127.0.0.1 -s "$PORT" -n "$NQN" -i "$Q" --runtime "$RT" --busy-poll "$HBP" ${SOCKBUF:+--socket-buffer "$SOCKBUF"} --nsid "$@")
	if [ "$COUNT" != 1 ]; then
		"${cmd[@]}" | grep -E 'IOPS=|lat \(usec\)|cpu:'
		return
	fi
	snap
	local c0 c1 pp
	c0=$(ctxsw)
	perf stat -x, -o "$D/target.perf" "${PERFEV[@]}" -p $tgt &
	pp=$!
	rm -f "$D/host.count"
	NVMETD_PERFCOUNT=$D/host.count perf stat -x, -o "$D/host.perf" "${PERFEV[@]}" -- "${cmd[@]}" >"$D/bench.out"
	kill -INT $pp
	wait $pp || true
	c1=$(ctxsw)
	snap
	grep -E 'IOPS=|lat \(usec\)|cpu:' "$D/bench.out"
	local ios
	ios=$(grep -oE '[0-9]+ I/Os in' "$D/bench.out" | awk '{s+=$1} END{print s+0}')
	"$D/countreport" -ios "$ios" -target-perf "$D/target.perf" -host-perf "$D/host.perf" \
		-target-count "$D/target.count" -host-count "$D/host.count" \
		-target-ctx "$(echo "$c0 $c1" | awk '{print $3-$1, $4-$2}')"
}
# metering switches the running nvmetd's metrics endpoint on (1) or off (0)
# by a reload, and waits until the endpoint answers (or is gone).
metering() {
	cp "$D/$([ "$1" = 1 ] && echo metered || echo unmetered).yaml" "$D/nvmetd.yaml"
	kill -HUP $tgt
	for _ in $(seq 200); do
		if curl -sf -o /dev/null "http://127.0.0.1:$MPORT/metrics"; then
			[ "$1" = 1 ] && return
		else
			[ "$1" = 0 ] && return
		fi
		sleep 0.05
	done
	echo "the metrics endpoint did not turn $([ "$1" = 1 ] && echo on || echo off) after SIGHUP" >&2
	cat "$D/nvmetd.log" >&2
	exit 1
}
# metered runs one load without and with the endpoint (scraped all along
# by a background loop), in the order $1 (01 or 10), and prints the ratio.
metered() {
	local order=$1 ns=$2 m out iops scraper
	shift # "$@": the namespace, then the load's arguments
	declare -A got
	for m in $(echo "$order" | grep -o .); do
		metering "$m"
		scraper=
		if [ "$m" = 1 ]; then
			: >"$D/scrapes"
			(while curl -sf -o /dev/null "http://127.0.0.1:$MPORT/metrics"; do echo >>"$D/scrapes"; sleep "$SCRAPE"; done) &
			scraper=$!
		fi
		out=$(bench "$@")
		[ -n "$scraper" ] && { kill $scraper; wait $scraper 2>/dev/null || true; }
		iops=$(grep -oE 'IOPS=[0-9]+' <<<"$out" | cut -d= -f2 | awk '{s+=$1} END{print s+0}')
		got[$m]=$iops
		echo "$out" | sed "s/^/[$([ "$m" = 1 ] && echo "metered, $(wc -l <"$D/scrapes") scrapes" || echo unmetered)] /"
	done
	echo "ratio metered/unmetered ${*:2}: $(awk -v a="${got[1]}" -v b="${got[0]}" 'BEGIN{printf "%.3f", (b>0 ? a/b : 0)}') (IOPS ${got[1]} / ${got[0]}, load $(cut -d' ' -f1 /proc/loadavg))"
	echo "$ns ${*:2}|${got[1]}|${got[0]}" >>"$D/ratios"
}
for round in $(seq "$ROUNDS"); do
	for ns in $NSS; do
		for load in $LOADS; do
			case $load in
			qd1) args=(--rw randread --bs 4k --iodepth 1) ;;
			qd64) args=(--rw randread --bs 4k --iodepth 64) ;;
			w64) args=(--rw randwrite --bs 4k --iodepth 64) ;;
			r128) args=(--rw read --bs 128k --iodepth 16) ;;
			w128) args=(--rw write --bs 128k --iodepth 16) ;;
			*) echo "unknown load $load" >&2; exit 2 ;;
			esac
			if [ "$METRICS" = 1 ]; then
				metered "$([ $((round % 2)) = 1 ] && echo 01 || echo 10)" "$ns" "${args[@]}"
			elif [ "$KBOUND" = 1 ] && [ "$load" = qd64 ]; then
				[ "$ns" = 2 ] && kbound
				bench "$ns" "${args[@]}" | tee "$D/last"
				iops=$(grep -oE 'IOPS=[0-9]+' "$D/last" | cut -d= -f2 | awk '{s+=$1} END{print s+0}')
				if [ "$ns" = 1 ]; then
					nullq=$iops
				elif [ "$ns" = 2 ] && [ -n "${nullq:-}" ]; then
					awk -v n="$nullq" -v k="$kb" -v f="$iops" 'BEGIN{b = 1 / (1 / n + 1 / k); printf "  bound: 1/(1/null + 1/kernel) = %.0f IOPS (%.2f of null); measured %.2f of null, %.2f of the bound\n", b, b / n, f / n, f / b}'
				fi
			else
				bench "$ns" "${args[@]}"
			fi
		done
	done
done
if [ "$METRICS" = 1 ]; then
	echo "# metered/unmetered IOPS, geometric mean over $ROUNDS rounds (load $(cut -d' ' -f1-3 /proc/loadavg)):"
	# Each line: the geometric mean of the pairs' ratios and its 95 %
	# interval (t ≈ 2 for the log-ratios' standard error): a metering
	# cost within noise is an interval that holds 1.
	awk -F'|' 'function line(name, s, q, n,   m, v, se) {
			m = s / n; v = (n > 1) ? (q - n * m * m) / (n - 1) : 0; se = (v > 0) ? sqrt(v / n) : 0
			printf "  %s: %.3f (95%% interval %.3f-%.3f, %d pairs)\n", name, exp(m), exp(m - 2 * se), exp(m + 2 * se), n
		}
		$2>0 && $3>0 {l=log($2/$3); s[$1]+=l; q[$1]+=l*l; n[$1]++; all+=l; allq+=l*l; N++}
		END {for (k in s) line("nsid " k, s[k], q[k], n[k]); if (N) line("all", all, allq, N)}' "$D/ratios" | sort
fi
