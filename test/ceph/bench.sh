#!/usr/bin/env bash
# test/ceph/bench.sh: the rbd backend against `rbd bench` (librbd directly),
# on the same image of the same cluster, in the same run.
#
#   test/ceph/bench.sh [REPS]      (default 3 repetitions; medians reported)
#
# Starts a private cluster (test/ceph/cluster.sh, stopped at the end),
# creates a 1 GiB image and writes all of it, then for each pattern runs
# `rbd bench` and BenchmarkRBD (backend/rbd_bench_test.go) alternately REPS
# times with the same I/O size, depth and number of operations:
#
#   randwrite-4KiB  randread-4KiB  seqwrite-128KiB  seqread-128KiB  (QD $QD)
#
# rbd bench issues librbd's asynchronous I/O (QD in flight from one
# thread); the backend runs twice: synchronous rbd_read/rbd_write from QD
# goroutines (what the target's workers do when the asynchronous path is
# full), and its asynchronous path (rbd_aio_*, completions on an eventfd;
# what the target uses), QD goroutines each waiting for its completion.
# rbd bench runs with the backend's
# librbd settings (--rbd-cache=false: a completed write is on the OSDs;
# the op timeouts, which cost librbd a timer per operation), and
# with NVMETD_RBD_BENCH_DEFAULT=1 also with librbd's defaults (rbd_cache on:
# writes may complete from the client's memory, which a gateway must not
# do), for reference.
#
# Third, the gateway's figure: nvmetd (built with the rbd tags) serves the
# image as namespace 1 on 127.0.0.1 and `nvmeof bench` (NVMe/iWARP over
# loopback, one I/O queue, QD in flight) runs the same pattern against it for
# NVMETD_RBD_BENCH_RUNTIME (10s), alternating with the others.
# NVMETD_RBD_BENCH_PERF=1 also records `perf stat -e
# context-switches,cpu-clock` of nvmetd over each of its runs (per I/O in the
# log). NVMETD_RBD_BENCH_BASE=REV also builds nvmetd of git revision REV and
# runs it the same way after each nvmetd run (before/after in one run; the
# two serve the same image in turn). Env: NVMETD_RBD_BENCH_QD (16), NVMETD_RBD_BENCH_OPS4K (16384),
# NVMETD_RBD_BENCH_OPS128K (4096).
set -euo pipefail

REPS=${1:-3}
QD=${NVMETD_RBD_BENCH_QD:-16}
OPS4K=${NVMETD_RBD_BENCH_OPS4K:-16384}
OPS128K=${NVMETD_RBD_BENCH_OPS128K:-4096}
DEFAULTS=${NVMETD_RBD_BENCH_DEFAULT:-0}
RUNTIME=${NVMETD_RBD_BENCH_RUNTIME:-10s}
PERF=${NVMETD_RBD_BENCH_PERF:-0}
BASE=${NVMETD_RBD_BENCH_BASE:-}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

log() { printf '[bench] %s\n' "$*" >&2; }

dir=$(mktemp -d /tmp/nvmetd-ceph-bench-XXXXXX)
bin=$(mktemp /tmp/nvmetd-rbd-bench-XXXXXX.test)
nvmetd_pids=()
cleanup() {
	for pid in "${nvmetd_pids[@]}"; do
		kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	done
	NVMETD_CEPH_DIR=$dir test/ceph/cluster.sh stop || true
	rm -rf "$dir" "$bin"
}
trap cleanup EXIT
export NVMETD_CEPH_DIR=$dir

load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$SECONDS
test/ceph/cluster.sh start
log "cluster started in $((SECONDS - t0)) s"
eval "$(test/ceph/cluster.sh env | sed 's/^/export /')"
RBD=(rbd --conf "$CEPH_CONF" --id "$CEPH_CLIENT_ID" --keyring "$CEPH_KEYRING" --pool "$CEPH_POOL")

tags=$(make -s --no-print-directory rbd-tags)
log "building the backend's test binary (-tags $tags)"
CGO_ENABLED=1 go test -c -tags "$tags" -o "$bin" ./backend/
log "building nvmetd (-tags $tags) and nvmeof"
CGO_ENABLED=1 go build -tags "$tags" -o "$dir/nvmetd" ./cmd/nvmetd
go build -o "$dir/nvmeof" ./cmd/nvmeof
if [ -n "$BASE" ]; then
	log "building nvmetd of $BASE (-tags $tags) for comparison"
	mkdir "$dir/base-src"
	git archive "$BASE" | tar -x -C "$dir/base-src"
	(cd "$dir/base-src" && CGO_ENABLED=1 go build -tags "$tags" -o "$dir/nvmetd_base" ./cmd/nvmetd)
fi

IMAGE=bench
"${RBD[@]}" create --size 1G "$IMAGE"
log "filling $IMAGE (1 GiB)"
"${RBD[@]}" bench --io-type write --io-pattern seq --io-size 4M --io-threads 4 --io-total 1G "$IMAGE" >/dev/null

# The librbd settings the rbd backend sets (backend/rbd.go; op_timeout's
# default 10s), given to rbd bench so that both run librbd alike: no
# write-back cache, and an op timeout (an Objecter timer per operation).
BACKEND_SETTINGS=(--rbd-cache=false --rados-osd-op-timeout 10 --rados-mon-op-timeout 10)

# rbd_bench PATTERN [ARGS]: ops/s of `rbd bench`.
rbd_bench() {
	local type=${1%%-*} size=${1##*-} pattern=rand ops extra=("${@:2}")
	type=${type#rand}; type=${type#seq}
	# full-seq: one sequential stream with QD in flight, as BenchmarkRBD
	# and nvmeof bench (fio's rw=read/write) issue it; rbd bench's "seq"
	# gives each of its QD threads a region of its own (QD streams, on QD
	# different objects at a time).
	case $1 in seq*) pattern=full-seq ;; esac
	case $size in 4KiB) size=4K ops=$OPS4K ;; 128KiB) size=128K ops=$OPS128K ;; esac
	local bytes=$((ops * ${size%K} * 1024))
	"${RBD[@]}" "${extra[@]}" bench --io-type "$type" --io-size "$size" --io-threads "$QD" --io-total "$bytes" \
		--io-pattern "$pattern" "$IMAGE" 2>&1 | awk '/^elapsed:/ { print $6 }'
}

# backend_bench PATTERN [-aio]: ops/s of BenchmarkRBD (synchronous calls;
# -aio: the asynchronous path).
backend_bench() {
	local ops=$OPS4K
	case $1 in *128KiB) ops=$OPS128K ;; esac
	NVMETD_RBD_BENCH_IMAGE=$IMAGE NVMETD_RBD_BENCH_QD=$QD "$bin" -test.run '^$' \
		-test.bench "^BenchmarkRBD\$/^$1-QD$QD${2:-}\$" -test.benchtime "${ops}x" -test.count 1 2>&1 |
		awk '/^BenchmarkRBD/ { for (i = 1; i < NF; i++) if ($(i+1) == "IOPS") print $i }'
}

# start_nvmetd NAME: nvmetd binary $dir/NAME serving the image on a free
# loopback port: sets port_NAME and pid_NAME.
NQN=nqn.2014-08.org.nvmetd:rbd-bench
start_nvmetd() {
	local name=$1 port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	cat >"$dir/$name.yaml" <<EOF
daemon:
  shutdown_timeout: 5s
ports:
  - address: 127.0.0.1
    service_id: "$port"
    subsystems: [$NQN]
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: {kind: rbd, pool: $CEPH_POOL, image: $IMAGE, ceph_conf: $CEPH_CONF, client_id: $CEPH_CLIENT_ID, keyring: $CEPH_KEYRING, block_size: 4096}
EOF
	mkdir -p "$dir/$name.d"
	"$dir/$name" --config "$dir/$name.yaml" --data-dir "$dir/$name.d" --control-socket "$dir/$name.sock" --log-format json >"$dir/$name.log" 2>&1 &
	local pid=$!
	nvmetd_pids+=("$pid")
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
		kill -0 "$pid" 2>/dev/null || { cat "$dir/$name.log" >&2; exit 1; }
		sleep 0.2
	done
	printf -v "port_$name" %s "$port"
	printf -v "pid_$name" %s "$pid"
	log "$name (pid $pid) serves $CEPH_POOL/$IMAGE on 127.0.0.1:$port"
}
start_nvmetd nvmetd
[ -z "$BASE" ] || start_nvmetd nvmetd_base

# nvmetd_bench PATTERN NAME: IOPS of nvmeof bench against nvmetd NAME.
nvmetd_bench() {
	local rw=${1%%-*} bs=4k name=$2
	local port_var=port_$name pid_var=pid_$name
	case $rw in seqwrite) rw=write ;; seqread) rw=read ;; esac
	case $1 in *128KiB) bs=128k ;; esac
	local pstat=$dir/perf.out perf_pid=
	if [ "$PERF" = 1 ]; then
		perf stat -x, -e context-switches,cpu-clock -p "${!pid_var}" -o "$pstat" &
		perf_pid=$!
	fi
	local iops
	iops=$("$dir/nvmeof" bench -t rdma -a 127.0.0.1 -s "${!port_var}" -n "$NQN" -i 1 --force --iodepth "$QD" --rw "$rw" --bs "$bs" \
		--runtime "$RUNTIME" -o json 2>/dev/null | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["total"]["iops"])')
	if [ -n "$perf_pid" ]; then
		kill -INT "$perf_pid"; wait "$perf_pid" || true
		awk -F, -v iops="$iops" -v rt="${RUNTIME%s}" -v name="$name" '$3 == "context-switches" { cs = $1 } $3 ~ /cpu-clock/ { ms = $1 }
			END { n = iops * rt; printf "[bench]   %s: %.1f context switches, %.0f us CPU per I/O\n", name, cs / n, ms * 1000 / n }' "$pstat" >&2
	fi
	echo "$iops"
}

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2] + a[NR/2+1]) / 2 }'; }

results=()
for p in randwrite-4KiB randread-4KiB seqwrite-128KiB seqread-128KiB; do
	r=() g=() a=() d=() t=() o=()
	for _ in $(seq "$REPS"); do
		r+=("$(rbd_bench "$p" "${BACKEND_SETTINGS[@]}")")
		g+=("$(backend_bench "$p")")
		a+=("$(backend_bench "$p" -aio)")
		t+=("$(nvmetd_bench "$p" nvmetd)")
		[ -z "$BASE" ] || o+=("$(nvmetd_bench "$p" nvmetd_base)")
		[ "$DEFAULTS" != 1 ] || d+=("$(rbd_bench "$p")")
	done
	log "$p: rbd bench ${r[*]}; backend ${g[*]}; backend aio ${a[*]}; nvmetd ${t[*]}${o[*]:+; nvmetd $BASE ${o[*]}}${d[*]:+; rbd bench with rbd_cache ${d[*]}}"
	rm=$(printf '%s\n' "${r[@]}" | median)
	gm=$(printf '%s\n' "${g[@]}" | median)
	am=$(printf '%s\n' "${a[@]}" | median)
	tm=$(printf '%s\n' "${t[@]}" | median)
	ratio() { awk -v a="$1" -v b="$rm" 'BEGIN { print a / b }'; }
	line=$(printf '%-18s %10.0f %10.0f %6.2f %10.0f %6.2f %10.0f %6.2f' "$p" "$rm" "$gm" "$(ratio "$gm")" "$am" "$(ratio "$am")" \
		"$tm" "$(ratio "$tm")")
	if [ -n "$BASE" ]; then
		om=$(printf '%s\n' "${o[@]}" | median)
		line+=$(printf ' %10.0f %6.2f' "$om" "$(ratio "$om")")
	fi
	if [ "$DEFAULTS" = 1 ]; then
		dm=$(printf '%s\n' "${d[@]}" | median)
		line+=$(printf ' %16.0f %8.2f' "$dm" "$(awk -v a="$gm" -v b="$dm" 'BEGIN { print a / b }')")
	fi
	results+=("$line")
done
printf '\n%-18s %10s %10s %6s %10s %6s %10s %6s' pattern "rbd bench" "be. sync" ratio "be. aio" ratio nvmetd ratio
[ -z "$BASE" ] || printf ' %10s %6s' "nvmetd $BASE" ratio
[ "$DEFAULTS" != 1 ] || printf ' %16s %8s' "rbd b. rbd_cache" ratio
printf '   (IOPS, median of %s; QD %s; load average %s at the start, %s at the end)\n' "$REPS" "$QD" "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s\n' "${results[@]}"
