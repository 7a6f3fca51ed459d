#!/bin/bash
# System calls per I/O (strace -c -f: counts, not timings) of nvmetd and
# nvmeof bench over loopback, 128 KiB read and write at QD16 on one queue,
# NVMe/TCP and NVMe/RDMA (iWARP), with the straight placement of large
# payloads on (default), wide (NVMETD_RX_PLACEMENT=wide: the straight read
# fills the read-ahead buffer behind the data) and off (=copy), both processes.
# strace slows both processes several-fold, which changes how much arrives
# per read: read the figures as counts under that load, not as the cost of
# an unslowed run. Usage: strace.sh [OUT_DIR]   (RT=3s per load)
set -euo pipefail
tgt=
cd "$(git rev-parse --show-toplevel)"
OUT=${1:-$(dirname "$0")}
RT=${RT:-3s}
D=$(mktemp -d /tmp/s8rx-strace.XXXX)
trap 'kill ${tgt:-} 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$D"' EXIT
go build -o "$D/" ./cmd/nvmetd ./cmd/nvmeof
NQN=nqn.2026-11.io.nvmetd:rxcopy
cat >"$D/nvmetd.yaml" <<Y
daemon:
  log_level: warn
  log_format: console
  control_socket: $D/nvmetd.sock
ports:
  - {id: 1, address: 127.0.0.1, service_id: 34427, subsystems: [$NQN]}
  - {id: 2, address: 127.0.0.1, service_id: 34428, transport: tcp, subsystems: [$NQN]}
subsystems:
  - nqn: $NQN
    allow_any_host: true
    namespaces:
      - nsid: 1
        backend: {kind: "null", size: 8GiB}
Y
summarize() { # strace -c output, I/O count
	awk -v ios="$2" '/^[ ]*[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+/ && $NF != "total" { calls=$4; name=$NF; if (calls/ios >= 0.05) printf "    %-14s %8.2f\n", name, calls/ios; tot += calls } END { printf "    %-14s %8.2f\n", "total", tot/ios }' "$1"
}
for mode in direct wide copy; do
	env=()
	[ "$mode" != direct ] && env=(NVMETD_RX_PLACEMENT=$mode)
	for tr in tcp rdma; do
		port=34427
		[ $tr = tcp ] && port=34428
		for rw in read write; do
			env "${env[@]}" "$D/nvmetd" --config "$D/nvmetd.yaml" >"$D/tgt.log" 2>&1 &
			tgt=$!
			for _ in $(seq 100); do ss -Hltn "sport = :$port" | grep -q . && break; sleep 0.1; done
			strace -q -c -f -o "$D/tgt.strace" -p "$tgt" 2>/dev/null &
			sp=$!
			sleep 0.5
			env "${env[@]}" strace -q -c -f -o "$D/host.strace" "$D/nvmeof" bench -t $tr -a 127.0.0.1 -s $port -n $NQN -i 1 \
				--rw $rw --bs 128k --iodepth 16 --runtime "$RT" --nsid 1 >"$D/bench.out" 2>&1
			kill -INT $sp; wait $sp || true
			kill $tgt; wait $tgt || true
			ios=$(grep -oE '[0-9]+ I/Os in' "$D/bench.out" | awk '{s+=$1} END{print s+0}')
			echo "== $tr 128KiB $rw QD16, placement $mode: $ios I/Os"
			echo "  target (nvmetd), calls per I/O:"; summarize "$D/tgt.strace" "$ios"
			echo "  host (nvmeof bench), calls per I/O:"; summarize "$D/host.strace" "$ios"
		done
	done
done 2>&1 | tee "$OUT/strace.txt"
