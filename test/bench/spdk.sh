#!/usr/bin/env bash
# spdk.sh: nvmetd and SPDK's NVMe-oF target side by side, on one machine, in
# one run, interleaved, so that the machine's speed of the moment affects both.
# The harness of ../shared/perf/compare.sh (issue 25), with the NVMe/TCP pair
# added (issue 24): spdk_nvme_perf, one initiator, against SPDK's nvmf_tgt and
# against nvmetd's NVMe/TCP port; only the target differs.
#
#   make build; OUT=perf-run1 SPDK_DIR=../spdk test/bench/spdk.sh
#   REPORT_ONLY=1 OUT=perf-run1 SPDK_DIR=../spdk test/bench/spdk.sh   (redo report.md from raw.csv)
#
# Build SPDK outside the project (never vendor it): ../shared/perf/README.md
# (build-spdk.sh: v26.05, DPDK v25.11, TCP transport only). Run it with
# nothing else on the machine, as root (hugepages).
#
# Environment:
#   NVMETD_BIN  dir holding nvmetd and nvmeof (make build) [bin, relative to where it runs]
#   SPDK_DIR    built SPDK tree (build/bin/nvmf_tgt, build/bin/spdk_nvme_perf,
#               scripts/rpc.py) [required]
#   ROUNDS      rounds [3]; systems run in SYSTEMS order in odd rounds, reversed in even ones
#   RT          seconds per load (integer) [5]
#   SYSTEMS     [spdk nvmetd-bp nvmetd spdk-irq nvmetd-ibp tcp-bp tcp]
#                 spdk        nvmf_tgt -m 0x1 (polling), spdk_nvme_perf -c 0x2
#                 spdk-irq    the same with nvmf_tgt --interrupt-mode (spdk_nvme_perf still polls)
#                 nvmetd-bp   transport.busy_poll BP on the target, nvmeof bench --busy-poll BP
#                 nvmetd      no busy polling on either side (the default)
#                 nvmetd-ibp  target without busy polling, host --busy-poll BP
#                 tcp-bp      nvmetd's NVMe/TCP port with transport.busy_poll BP, spdk_nvme_perf -c 0x2
#                 tcp         nvmetd's NVMe/TCP port, no busy polling, spdk_nvme_perf -c 0x2
#               (tcp-bp pairs with spdk, tcp with spdk-irq: the same initiator, the same protocol)
#   LOADS       [qd1 qd64 w64 r128 w128]
#                 qd1 4 KiB randread QD1, qd64 4 KiB randread QD64, w64 4 KiB randwrite QD64,
#                 r128 128 KiB sequential read QD16, w128 128 KiB sequential write QD16
#   OUT         output dir [compare-out-<UTC time>]: raw.csv, report.md, meta.txt, logs/
#   BP=50us  TGT_CPU=0  INI_CPU=1  SPDK_PORT=4420  NVMETD_PORT=4520  HUGEPAGES=1024 (2 MiB pages)
#
# Method: target pinned to TGT_CPU, initiator to INI_CPU (taskset; GOMAXPROCS=1
# for nvmetd and nvmeof), one I/O queue, listener on 127.0.0.1, null namespace
# of 8 GiB with 512-byte blocks. Every (round, load, system) run starts its
# target fresh, waits until the port listens, runs the initiator for RT
# seconds, and tears the target down (by the PID started here) whatever
# happened. A failed run gets rc != 0 in raw.csv and the harness goes on.
# Per run: tgt_cpu_s = utime+stime delta of the target (/proc/PID/stat) over
# the initiator's lifetime; ini_cpu_s = the initiator's utime+stime over its
# whole life (from its rusage when reaped: a fresh process, so its delta from
# zero; it includes its start-up and connect); cpu_busy_s, cpu_irq_s, steal_s
# = deltas of /proc/stat for the two pinned CPUs over the same window;
# other_s = cpu_busy_s - tgt_cpu_s - ini_cpu_s: CPU time on the pinned CPUs
# that went to anything else (the interference); cpu_total_s = the two CPUs'
# whole time over the window (its denominator, about 2 x wall_s); ksoftirqd_s
# = the part of other_s that the two CPUs' ksoftirqd threads took.
# SPDK's processes are also started under taskset (nvmf_tgt -m 0x1 under
# taskset -c TGT_CPU, spdk_nvme_perf -c 0x2 under taskset -c INI_CPU) so that
# DPDK's helper threads stay on the same CPU as their reactor.
set -uo pipefail
export PATH=/usr/bin:/usr/sbin:/bin:/sbin:$PATH
export LC_ALL=C

NVMETD_BIN=${NVMETD_BIN:-bin}
SPDK_DIR=${SPDK_DIR:?set SPDK_DIR to a built SPDK tree (see README.md beside this script)}
ROUNDS=${ROUNDS:-3}
RT=${RT:-5}
SYSTEMS=${SYSTEMS:-spdk nvmetd-bp nvmetd spdk-irq nvmetd-ibp tcp-bp tcp}
LOADS=${LOADS:-qd1 qd64 w64 r128 w128}
OUT=${OUT:-compare-out-$(date -u +%Y%m%dT%H%M%SZ)}
BP=${BP:-50us}
TGT_CPU=${TGT_CPU:-0}
INI_CPU=${INI_CPU:-1}
SPDK_PORT=${SPDK_PORT:-4420}
NVMETD_PORT=${NVMETD_PORT:-4520}
HUGEPAGES=${HUGEPAGES:-1024}
REPORT_ONLY=${REPORT_ONLY:-0}
SPDK_NQN=nqn.2016-06.io.spdk:cnode1
NVMETD_NQN=nqn.2024-01.io.nvmetd:bench
PY=/usr/bin/python3
HZ=$(getconf CLK_TCK)

die() { echo "compare.sh: $*" >&2; exit 1; }
log() { echo "[$(date -u +%T)] $*" >&2; }

mkdir -p "$OUT/logs" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
CSV=$OUT/raw.csv
HEADER=round,seq,system,load,rt_s,rc,iops,mib_s,p50_us,p99_us,avg_us,tgt_cpu_s,ini_cpu_s,wall_s,cpu_busy_s,cpu_irq_s,steal_s,cpu_total_s,other_s,ksoftirqd_s,load1,start_utc,note

# ---------------------------------------------------------------- report
report() {
	"$PY" - "$OUT" <<'PY'
import csv, os, statistics, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(out, "raw.csv"))))
meta = {}
mp = os.path.join(out, "meta.txt")
if os.path.exists(mp):
    for line in open(mp):
        if "=" in line:
            k, v = line.rstrip("\n").split("=", 1)
            meta[k] = v
def f(x):
    try: return float(x)
    except (TypeError, ValueError): return None
def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None
loads, systems = [], []
for r in rows:
    if r["load"] not in loads: loads.append(r["load"])
    if r["system"] not in systems: systems.append(r["system"])
order = ["spdk", "nvmetd-bp", "nvmetd", "spdk-irq", "nvmetd-ibp", "tcp-bp", "tcp"]
systems.sort(key=lambda s: order.index(s) if s in order else 99)
desc = {"qd1": "4 KiB randread QD1", "qd64": "4 KiB randread QD64", "w64": "4 KiB randwrite QD64",
        "r128": "128 KiB read QD16", "w128": "128 KiB write QD16"}
ok = [r for r in rows if r["rc"] == "0"]
def sel(load, sysname, rs=ok):
    return [r for r in rs if r["load"] == load and r["system"] == sysname]
def cap(r):
    # the two pinned CPUs' time over the run: /proc/stat's total, else 2 x wall
    return f(r.get("cpu_total_s")) or (2 * f(r["wall_s"]) if f(r["wall_s"]) else None)
def pct(r, key):
    c = cap(r); v = f(r[key])
    return None if v is None or not c else 100 * v / c
def fmt(x, nd=1):
    return "–" if x is None else f"{x:.{nd}f}"
def fk(x):
    return "–" if x is None else (f"{x/1000:.1f}k" if x >= 1000 else f"{x:.0f}")
L = []
L.append("# nvmetd vs SPDK NVMe-oF target, side by side (test/bench/spdk.sh)\n")
L.append(f"- started {meta.get('start_utc','?')}, ended {meta.get('end_utc','?')}; host {meta.get('host','?')}, "
         f"{meta.get('cpus','?')} CPUs ({meta.get('cpu_model','?')}), kernel {meta.get('kernel','?')}")
L.append(f"- load average at start: **{meta.get('loadavg_start','?')}**; at end: {meta.get('loadavg_end','?')}")
L.append(f"- {meta.get('nvmetd_version','nvmetd ?')}; SPDK {meta.get('spdk_version','?')} (DPDK {meta.get('dpdk_version','?')})")
L.append(f"- ROUNDS={meta.get('rounds','?')} RT={meta.get('rt','?')}s BP={meta.get('bp','?')}, target on CPU {meta.get('tgt_cpu','?')}, "
         f"initiator on CPU {meta.get('ini_cpu','?')}, one I/O queue, 127.0.0.1, null namespace 8 GiB / 512 B")
L.append(f"- runs: {len(rows)}, rc 0: {len(ok)}, failed: {len(rows)-len(ok)}")
L.append("")
L.append("## Medians per load and system (rc 0 runs)\n")
L.append("IOPS with the rounds' range; CPU = seconds over the run (target / initiator); other = CPU time on the two "
         "pinned CPUs not charged to the pinned processes, as % of their time over the run. ini CPU includes the initiator's start-up (about 0.15 s for spdk_nvme_perf's DPDK init, 0.05 s for nvmeof).\n")
L.append("| load | system | n | IOPS (range) | MiB/s | p50 µs | p99 µs | avg µs | tgt CPU s | ini CPU s | other % |")
L.append("|---|---|---|---|---|---|---|---|---|---|---|")
for ld in loads:
    for s in systems:
        rs = sel(ld, s)
        nall = len(sel(ld, s, rows))
        if not nall: continue
        iops = [f(r["iops"]) for r in rs]
        other = [pct(r, "other_s") for r in rs]
        rng = f"{fk(min(iops))}–{fk(max(iops))}" if iops else "–"
        L.append(f"| {desc.get(ld, ld)} | {s} | {len(rs)}/{nall} | {fk(med(iops))} ({rng}) | {fmt(med([f(r['mib_s']) for r in rs]),0)} | "
                 f"{fmt(med([f(r['p50_us']) for r in rs]))} | {fmt(med([f(r['p99_us']) for r in rs]))} | {fmt(med([f(r['avg_us']) for r in rs]))} | "
                 f"{fmt(med([f(r['tgt_cpu_s']) for r in rs]),2)} | {fmt(med([f(r['ini_cpu_s']) for r in rs]),2)} | {fmt(med(other),0)} |")
L.append("")
pairs = [("nvmetd-bp", "spdk"), ("nvmetd", "spdk-irq"), ("nvmetd-ibp", "spdk-irq"), ("tcp-bp", "spdk"), ("tcp", "spdk-irq")]
pairs = [(a, b) for a, b in pairs if a in systems and b in systems]
L.append("## Ratios (ratio of medians; in brackets the range of the per-round ratios)\n")
L.append("IOPS ratio > 1: nvmetd faster; p50 ratio > 1: nvmetd slower.\n")
hdr = "| load | " + " | ".join(f"{a}/{b} IOPS | {a}/{b} p50" for a, b in pairs) + " |"
L.append(hdr)
L.append("|---|" + "---|---|" * len(pairs))
for ld in loads:
    cells = []
    for a, b in pairs:
        for key in ("iops", "p50_us"):
            ra, rb = sel(ld, a), sel(ld, b)
            ma, mb = med([f(r[key]) for r in ra]), med([f(r[key]) for r in rb])
            if ma is None or not mb:
                cells.append("–"); continue
            per = []
            for rnd in sorted({r["round"] for r in ra} & {r["round"] for r in rb}):
                xa = med([f(r[key]) for r in ra if r["round"] == rnd]); xb = med([f(r[key]) for r in rb if r["round"] == rnd])
                if xa is not None and xb: per.append(xa / xb)
            extra = f" ({min(per):.2f}–{max(per):.2f})" if len(per) > 1 else ""
            cells.append(f"{ma/mb:.2f}{extra}")
    L.append(f"| {desc.get(ld, ld)} | " + " | ".join(cells) + " |")
L.append("")
L.append("## Interference (noise)\n")
L.append("Per run, from /proc/stat for the two pinned CPUs over the initiator's lifetime: busy (user+nice+system+irq+softirq) "
         "minus the target's and initiator's own utime+stime = CPU taken by other processes; steal = time the hypervisor ran "
         "something else. As % of the two CPUs' time over the run (/proc/stat's total for them, ≈ 2 × wall). "
         "\u201cOf which ksoftirqd\u201d: the part of other that the ksoftirqd threads of these CPUs took (network work "
         "deferred by the kernel, most likely the benchmark's own loopback traffic rather than foreign load).\n")
L.append("| system | runs | other % median (max) | of which ksoftirqd % median | steal % median (max) | load1 median (max) |")
L.append("|---|---|---|---|---|---|")
allr = [r for r in rows if cap(r)]
for s in systems + ["all"]:
    rs = allr if s == "all" else [r for r in allr if r["system"] == s]
    if not rs: continue
    o = [pct(r, "other_s") for r in rs]; o = [x for x in o if x is not None]
    st = [pct(r, "steal_s") for r in rs]; st = [x for x in st if x is not None]
    la = [f(r["load1"]) for r in rs]; la = [x for x in la if x is not None]
    ks = [pct(r, "ksoftirqd_s") for r in rs if "ksoftirqd_s" in r]; ks = [x for x in ks if x is not None]
    L.append(f"| {s} | {len(rs)} | {fmt(med(o),1)} ({fmt(max(o) if o else None,1)}) | {fmt(med(ks),1)} | {fmt(med(st),1)} ({fmt(max(st) if st else None,1)}) | "
             f"{fmt(med(la),2)} ({fmt(max(la) if la else None,2)}) |")
tw = sum(cap(r) for r in allr)
if tw:
    to = sum(f(r["other_s"]) or 0 for r in allr); ts = sum(f(r["steal_s"]) or 0 for r in allr)
    L.append(f"\nOverall: other processes took {100*to/tw:.1f} % and steal {100*ts/tw:.1f} % of the pinned CPUs' time during the runs "
             f"({to:.1f} s + {ts:.1f} s of {tw:.1f} s).")
bad = [r for r in rows if r["rc"] != "0"]
if bad:
    L.append("\n## Failed runs\n")
    for r in bad:
        L.append(f"- round {r['round']} seq {r['seq']} {r['system']} {r['load']}: rc {r['rc']} {r.get('note','')}")
L.append("\nRaw per-run figures: raw.csv; logs of every run: logs/.")
open(os.path.join(out, "report.md"), "w").write("\n".join(L) + "\n")
PY
}

if [ "$REPORT_ONLY" = 1 ]; then
	[ -f "$CSV" ] || die "no $CSV"
	report && echo "$OUT/report.md"
	exit
fi

# ---------------------------------------------------------------- checks
[[ $RT =~ ^[0-9]+$ ]] && [ "$RT" -ge 1 ] || die "RT must be a whole number of seconds"
[[ $ROUNDS =~ ^[0-9]+$ ]] || die "ROUNDS must be a number"
need_spdk=0 need_nvmetd=0
for s in $SYSTEMS; do
	case $s in
	spdk | spdk-irq) need_spdk=1 ;;
	nvmetd | nvmetd-bp | nvmetd-ibp) need_nvmetd=1 ;;
	tcp | tcp-bp) need_nvmetd=1 need_spdk=1 ;;
	*) die "unknown system $s" ;;
	esac
done
for l in $LOADS; do case $l in qd1 | qd64 | w64 | r128 | w128) ;; *) die "unknown load $l" ;; esac; done
if [ $need_nvmetd = 1 ]; then
	[ -x "$NVMETD_BIN/nvmetd" ] && [ -x "$NVMETD_BIN/nvmeof" ] || die "no $NVMETD_BIN/nvmetd or nvmeof (make build)"
fi
if [ $need_spdk = 1 ]; then
	NVMF_TGT=$SPDK_DIR/build/bin/nvmf_tgt
	NVME_PERF=$SPDK_DIR/build/bin/spdk_nvme_perf
	RPC=$SPDK_DIR/scripts/rpc.py
	[ -x "$NVMF_TGT" ] && [ -x "$NVME_PERF" ] && [ -f "$RPC" ] || die "no nvmf_tgt, spdk_nvme_perf or rpc.py under $SPDK_DIR"
	# 2 MiB hugepages on hugetlbfs at /dev/hugepages.
	if [ "$(cat /proc/sys/vm/nr_hugepages)" -lt "$HUGEPAGES" ]; then
		echo "$HUGEPAGES" >/proc/sys/vm/nr_hugepages || die "cannot reserve hugepages"
	fi
	mountpoint -q /dev/hugepages || { mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages; } || die "cannot mount hugetlbfs"
	free_hp=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
	[ "$free_hp" -ge 256 ] || die "only $free_hp free hugepages"
fi
if [ -e "$CSV" ]; then
	old=$(date -u +%Y%m%dT%H%M%SZ)
	log "$CSV exists: moved to raw.csv.old-$old (and logs to logs.old-$old)"
	mv "$CSV" "$CSV.old-$old"
	mv "$OUT/logs" "$OUT/logs.old-$old" && mkdir -p "$OUT/logs"
fi

WORK=$OUT/.work
[ ${#WORK} -le 80 ] || WORK=$(mktemp -d /tmp/cmp.XXXXXX)
mkdir -p "$WORK"

# ---------------------------------------------------------------- helpers
tgt_pid= ini_pid=
# proc_state PID: its state letter, empty if gone.
proc_state() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $1}'; }
# snap: SNAP="time busy irq steal total tgt" without forking, so that the
# window is tight: the time ($EPOCHREALTIME), then in clock ticks for the two
# pinned CPUs from /proc/stat busy (user+nice+system+irq+softirq), irq
# (irq+softirq), steal and total (all of it, idle included), and the
# target's utime+stime (-1 if unreadable).
snap() {
	local name u n s idle iow irq sirq st rest line p b=0 q=0 t=0 all=0 tc=-1 ks=0
	while read -r name u n s idle iow irq sirq st rest; do
		if [ "$name" = "cpu$TGT_CPU" ] || [ "$name" = "cpu$INI_CPU" ]; then
			b=$((b + u + n + s + irq + sirq))
			q=$((q + irq + sirq))
			t=$((t + st))
			all=$((all + u + n + s + idle + iow + irq + sirq + st))
		fi
	done </proc/stat
	if [ -n "$tgt_pid" ] && { read -r line <"/proc/$tgt_pid/stat"; } 2>/dev/null; then
		set -- ${line##*) }
		tc=$((${12} + ${13}))
	fi
	for p in $KSOFTIRQD; do
		if { read -r line <"/proc/$p/stat"; } 2>/dev/null; then
			set -- ${line##*) }
			ks=$((ks + ${12} + ${13}))
		fi
	done
	SNAP="$EPOCHREALTIME $b $q $t $all $tc $ks"
}
# The kernel's ksoftirqd threads of the two pinned CPUs: network work that
# the kernel deferred (most likely the benchmark's own loopback traffic),
# counted in other_s but also reported on its own (ksoftirqd_s).
KSOFTIRQD=$(pgrep -x "ksoftirqd/$TGT_CPU"; pgrep -x "ksoftirqd/$INI_CPU")
KSOFTIRQD=$(echo $KSOFTIRQD)
listening() { ss -Hltn "sport = :$1" | grep -q .; }
# stop PID: SIGTERM, up to 20 s, then SIGKILL; reap it.
stop() {
	local p=$1 i st
	[ -n "$p" ] || return 0
	kill -TERM "$p" 2>/dev/null
	for i in $(seq 200); do
		st=$(proc_state "$p")
		[ -z "$st" ] || [ "$st" = Z ] && break
		sleep 0.1
	done
	st=$(proc_state "$p")
	if [ -n "$st" ] && [ "$st" != Z ]; then
		log "PID $p did not stop on SIGTERM: SIGKILL"
		kill -KILL "$p" 2>/dev/null
	fi
	wait "$p" 2>/dev/null
	# DPDK's files of that process (SPDK names them after the PID).
	rm -f /dev/hugepages/spdk_pid"$p"map_* /dev/shm/*.pid"$p" 2>/dev/null
	rm -rf /var/run/dpdk/spdk_pid"$p" 2>/dev/null
	return 0
}
cleanup() {
	local p
	# The initiator (timeout, which passes SIGTERM on to it), then its subshell.
	if [ -n "$ini_pid" ] && [ -n "$(proc_state "$ini_pid")" ]; then
		p=$(cat "$WORK/ini.pid" 2>/dev/null)
		[ -n "$p" ] && kill -TERM "$p" 2>/dev/null
		stop "$ini_pid"
	fi
	[ -n "$tgt_pid" ] && stop "$tgt_pid"
	ini_pid= tgt_pid=
}
trap 'cleanup; exit 130' INT TERM
trap 'cleanup' EXIT

# start_target SYSTEM LOGFILE: starts the target pinned, configures it, waits
# for its listener; sets tgt_pid. Returns non-zero on failure.
start_target() {
	local sys=$1 lg=$2 port i irq=
	case $sys in
	spdk | spdk-irq)
		port=$SPDK_PORT
		[ "$sys" = spdk-irq ] && irq=--interrupt-mode
		listening "$port" && { note="port $port in use"; return 1; }
		rm -f "$WORK/spdk.sock"
		taskset -c "$TGT_CPU" "$NVMF_TGT" -m "$(printf '0x%x' $((1 << TGT_CPU)))" -r "$WORK/spdk.sock" $irq >"$lg" 2>&1 &
		tgt_pid=$!
		if ! printf '%s\n' \
			"nvmf_create_transport -t TCP" \
			"bdev_null_create Null0 8192 512" \
			"nvmf_create_subsystem $SPDK_NQN -a -s SPDK00000000000001 -d SPDK_Null" \
			"nvmf_subsystem_add_ns $SPDK_NQN Null0" \
			"nvmf_subsystem_add_listener $SPDK_NQN -t tcp -f ipv4 -a 127.0.0.1 -s $port" |
			timeout 90 "$PY" "$RPC" -s "$WORK/spdk.sock" -r 300 -t 60 >>"$lg.rpc" 2>&1; then
			note="rpc failed"
			return 1
		fi
		;;
	nvmetd | nvmetd-bp | nvmetd-ibp | tcp | tcp-bp)
		port=$NVMETD_PORT
		local tbp=0s trt=rdma
		[ "$sys" = nvmetd-bp ] || [ "$sys" = tcp-bp ] && tbp=$BP
		[ "$sys" = tcp ] || [ "$sys" = tcp-bp ] && trt=tcp
		listening "$port" && { note="port $port in use"; return 1; }
		cat >"$WORK/nvmetd.yaml" <<Y
daemon:
  log_level: warn
  log_format: console
  control_socket: $WORK/nvmetd.sock
ports:
  - id: 1
    address: 127.0.0.1
    service_id: $port
    transport: $trt
    subsystems: [$NVMETD_NQN]
transport:
  busy_poll: $tbp
subsystems:
  - nqn: $NVMETD_NQN
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: {kind: "null", size: 8GiB}
Y
		cp "$WORK/nvmetd.yaml" "$lg.yaml"
		taskset -c "$TGT_CPU" env GOMAXPROCS=1 "$NVMETD_BIN/nvmetd" --config "$WORK/nvmetd.yaml" >"$lg" 2>&1 &
		tgt_pid=$!
		;;
	esac
	for i in $(seq 600); do
		listening "$port" && return 0
		st=$(proc_state "$tgt_pid")
		[ -z "$st" ] || [ "$st" = Z ] && { note="target exited"; return 1; }
		sleep 0.1
	done
	note="target not listening after 60 s"
	return 1
}

# ini_cmd SYSTEM LOAD: the initiator's command line into the array ini.
ini_cmd() {
	local sys=$1 load=$2 rw bs qd hbp=0s
	case $load in
	qd1) rw=randread bs=4096 qd=1 ;;
	qd64) rw=randread bs=4096 qd=64 ;;
	w64) rw=randwrite bs=4096 qd=64 ;;
	r128) rw=read bs=131072 qd=16 ;;
	w128) rw=write bs=131072 qd=16 ;;
	esac
	case $sys in
	spdk | spdk-irq)
		ini=("$NVME_PERF" -c "$(printf '0x%x' $((1 << INI_CPU)))" -q "$qd" -o "$bs" -w "$rw" -t "$RT" -L
			-r "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$SPDK_PORT subnqn:$SPDK_NQN")
		;;
	tcp | tcp-bp)
		ini=("$NVME_PERF" -c "$(printf '0x%x' $((1 << INI_CPU)))" -q "$qd" -o "$bs" -w "$rw" -t "$RT" -L
			-r "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$NVMETD_PORT subnqn:$NVMETD_NQN")
		;;
	*)
		[ "$sys" != nvmetd ] && hbp=$BP
		ini=(env GOMAXPROCS=1 "$NVMETD_BIN/nvmeof" bench -t rdma -a 127.0.0.1 -s "$NVMETD_PORT" -n "$NVMETD_NQN" -i 1
			--nsid 1 --runtime "${RT}s" --busy-poll "$hbp" --rw "$rw" --bs "$bs" --iodepth "$qd" -o json)
		;;
	esac
}

# parse SYSTEM OUTFILE: "iops mib_s p50 p99 avg" or nothing.
parse() {
	case $1 in
	spdk | spdk-irq | tcp | tcp-bp)
		awk '
			/^Total +:/ { iops = $3; mib = $4; avg = $5 }
			/^ *50\.00000% :/ { p50 = $3; sub(/us$/, "", p50) }
			/^ *99\.00000% :/ { p99 = $3; sub(/us$/, "", p99) }
			END { if (iops != "" && p50 != "" && p99 != "") printf "%.1f %.2f %.2f %.2f %.2f\n", iops, mib, p50, p99, avg }' "$2"
		;;
	*)
		"$PY" -c '
import json, sys
d = json.load(open(sys.argv[1]))
t = d["total"]
if d.get("errors", 0): sys.exit(0)
print("%.1f %.2f %.2f %.2f %.2f" % (t["iops"], t["mib_per_s"], t["lat_p50_us"], t["lat_p99_us"], t["lat_mean_us"]))' "$2" 2>/dev/null
		;;
	esac
}

# run_one ROUND SEQ SYSTEM LOAD: one measured run; appends a row to raw.csv.
run_one() {
	local round=$1 seq=$2 sys=$3 load=$4 base rc=0 res s0 s1 l1 start p
	base=$OUT/logs/$(printf '%03d' "$seq")-r$round-$sys-$load
	note=
	l1=$(cut -d' ' -f1 /proc/loadavg)
	start=$(date -u +%FT%TZ)
	local iops= mib= p50= p99= avg= tcpu= icpu= wall= busy= irq= steal= total= other= ksirq=
	if ! start_target "$sys" "$base.tgt.log"; then
		rc=90
	else
		ini_cmd "$sys" "$load"
		printf '%q ' "${ini[@]}" >"$base.cmd"
		echo >>"$base.cmd"
		rm -f "$WORK/ini.rc" "$WORK/ini.times" "$WORK/ini.pid" "$WORK/ini.self"
		snap
		s0=$SNAP
		(
			# sh writes the initiator's own PID (for the clean-up of its DPDK files), then execs it.
			taskset -c "$INI_CPU" timeout -k 5 $((RT + 60)) \
				sh -c 'echo $$ >"$0"; exec "$@"' "$WORK/ini.self" "${ini[@]}" >"$base.ini.out" 2>"$base.ini.err" &
			echo $! >"$WORK/ini.pid"
			wait $!
			echo $? >"$WORK/ini.rc"
			times >"$WORK/ini.times"
		) &
		ini_pid=$!
		wait "$ini_pid"
		ini_pid=
		snap
		s1=$SNAP
		rc=$(cat "$WORK/ini.rc" 2>/dev/null || echo 99)
		p=$(cat "$WORK/ini.self" 2>/dev/null)
		if [ -n "$p" ] && [ -z "$(proc_state "$p")" ]; then
			rm -f /dev/hugepages/spdk_pid"$p"map_* /dev/shm/*.pid"$p" 2>/dev/null
			rm -rf /var/run/dpdk/spdk_pid"$p" 2>/dev/null
		fi
		[ "$rc" = 124 ] && note="initiator timed out"
		# times' second line: the children's user and system time (XmY.YYYs).
		icpu=$(sed -n 2p "$WORK/ini.times" 2>/dev/null | awk '
			function s(x,  m) { m = x; sub(/m.*/, "", m); sub(/^[0-9]+m/, "", x); sub(/s$/, "", x); return m * 60 + x }
			NF == 2 { printf "%.3f", s($1) + s($2) }')
		read -r wall tcpu busy irq steal total other ksirq < <(awk -v a="$s0" -v b="$s1" -v hz="$HZ" -v ic="${icpu:--1}" 'BEGIN {
			split(a, x, " "); split(b, y, " ")
			t = (x[6] < 0 || y[6] < 0) ? "" : sprintf("%.3f", (y[6] - x[6]) / hz)
			o = (t == "" || ic < 0) ? "" : sprintf("%.2f", (y[2] - x[2]) / hz - t - ic)
			printf "%.3f %s %.2f %.2f %.2f %.2f %s %.2f\n", y[1] - x[1], (t == "" ? "-" : t), (y[2] - x[2]) / hz,
				(y[3] - x[3]) / hz, (y[4] - x[4]) / hz, (y[5] - x[5]) / hz, (o == "" ? "-" : o), (y[7] - x[7]) / hz }')
		[ "$tcpu" = - ] && tcpu=
		[ "$other" = - ] && other=
		if [ "$rc" = 0 ]; then
			res=$(parse "$sys" "$base.ini.out")
			if [ -z "$res" ]; then
				rc=98
				note="no result in the initiator's output"
			else
				read -r iops mib p50 p99 avg <<<"$res"
			fi
		fi
		[ "$rc" != 0 ] && [ -z "$note" ] && note="initiator exit $rc"
	fi
	stop "$tgt_pid"
	tgt_pid=
	echo "$round,$seq,$sys,$load,$RT,$rc,$iops,$mib,$p50,$p99,$avg,$tcpu,$icpu,$wall,$busy,$irq,$steal,$total,$other,$ksirq,$l1,$start,${note//,/;}" >>"$CSV"
	log "r$round #$seq $sys $load: rc=$rc iops=${iops:-} p50=${p50:-} p99=${p99:-} tgt_cpu=${tcpu:-} ini_cpu=${icpu:-} other=${other:-} ${note}"
}

# ---------------------------------------------------------------- run
{
	echo "start_utc=$(date -u +%FT%TZ)"
	echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
	echo "host=$(hostname)"
	echo "cpus=$(nproc)"
	echo "cpu_model=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
	echo "kernel=$(uname -r)"
	echo "rounds=$ROUNDS"
	echo "rt=$RT"
	echo "bp=$BP"
	echo "tgt_cpu=$TGT_CPU"
	echo "ini_cpu=$INI_CPU"
	echo "systems=$SYSTEMS"
	echo "loads=$LOADS"
	[ $need_nvmetd = 1 ] && echo "nvmetd_version=$("$NVMETD_BIN/nvmetd" --version 2>&1 | head -1)"
	if [ $need_spdk = 1 ]; then
		echo "spdk_version=$(cat "$SPDK_DIR/VERSION" 2>/dev/null | head -1) ($(git -C "$SPDK_DIR" describe --tags 2>/dev/null || echo '?'))"
		echo "dpdk_version=$(cat "$SPDK_DIR/dpdk/VERSION" 2>/dev/null || echo '?')"
		echo "hugepages=$(awk '/HugePages_Total/ {t=$2} /HugePages_Free/ {f=$2} END {print t " total, " f " free"}' /proc/meminfo)"
	fi
} >"$OUT/meta.txt"
echo "$HEADER" >"$CSV"
log "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); output in $OUT"

seq=0
for round in $(seq "$ROUNDS"); do
	order=($SYSTEMS)
	if [ $((round % 2)) = 0 ]; then
		rev=()
		for ((i = ${#order[@]} - 1; i >= 0; i--)); do rev+=("${order[i]}"); done
		order=("${rev[@]}")
	fi
	for load in $LOADS; do
		for sys in "${order[@]}"; do
			seq=$((seq + 1))
			run_one "$round" "$seq" "$sys" "$load"
		done
	done
done
echo "end_utc=$(date -u +%FT%TZ)" >>"$OUT/meta.txt"
echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.txt"
rm -rf "$WORK"
report || die "report.md failed (raw.csv is complete; REPORT_ONLY=1 redoes it)"
log "done: $OUT/report.md"
cat "$OUT/report.md"
