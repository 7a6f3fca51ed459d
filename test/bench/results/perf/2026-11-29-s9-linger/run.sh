#!/usr/bin/env bash
# A/B of NVMETD_RX_LINGER (iwarp/linger.go) on one build, alone on the
# machine: 4 KiB randread QD1 on the null namespace, both sides pinned, in
# the default mode (both sleep: BP=0s) and with the host spinning (BP=0s
# HBP=50us, as SPDK's interrupt mode with its polling initiator); the three
# settings interleaved, ROUNDS rounds.
#   make build && test/bench/results/perf/2026-11-29-s9-linger/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../../../.."
ROUNDS=${ROUNDS:-3}
RT=${RT:-8s}
for r in $(seq "$ROUNDS"); do
  for hbp in 0s 50us; do
    for mode in off sys raw; do
      case $mode in
        off) env -u NVMETD_RX_LINGER -u NVMETD_RX_LINGER_RAW BP=0s HBP=$hbp NSS=1 LOADS=qd1 RT=$RT test/bench/loopback.sh 2>&1 | sed "s/^/round=$r hbp=$hbp mode=$mode: /" ;;
        sys) NVMETD_RX_LINGER=1ms BP=0s HBP=$hbp NSS=1 LOADS=qd1 RT=$RT test/bench/loopback.sh 2>&1 | sed "s/^/round=$r hbp=$hbp mode=$mode: /" ;;
        raw) NVMETD_RX_LINGER=1ms NVMETD_RX_LINGER_RAW=1 BP=0s HBP=$hbp NSS=1 LOADS=qd1 RT=$RT test/bench/loopback.sh 2>&1 | sed "s/^/round=$r hbp=$hbp mode=$mode: /" ;;
      esac
    done
  done
done
