#!/bin/bash
# usage: s9-repro.sh KERNEL N RACE(0/1) BUSY(0/1) TAG
K=$1; N=$2; RACE=$3; BUSY=$4; TAG=$5
OUT=/tmp/s9-panic-runs; mkdir -p $OUT
cd /work/wt/s9-panic
for i in $(seq 1 $N); do
  flags=""; [ "$RACE" = 1 ] && flags="-race"
  bp=""
  if [ "$BUSY" = 1 ]; then (while :; do :; done) & bp=$!; fi
  before=$(ls -d /tmp/nvmetd-lab-*/ 2>/dev/null | sort)
  log=$OUT/$TAG-$K-$i.log
  echo "=== run $i $(date -u +%T) k=$K race=$RACE busy=$BUSY" >> $OUT/summary.txt
  NVMETD_LAB_KEEP=1 NVMETD_LAB_KERNEL=$K flock /tmp/nvmetd-lab.lock go test $flags -count=1 -v -run 'TestLinux/'$K'/LinuxHostTCPReconnect$' ./test/interop/ > $log 2>&1
  rc=$?
  [ -n "$bp" ] && kill $bp
  after=$(ls -d /tmp/nvmetd-lab-*/ 2>/dev/null | sort)
  for d in $(comm -13 <(echo "$before") <(echo "$after")); do
    cp $d/console.log $OUT/$TAG-$K-$i.console.log 2>/dev/null
    test/lab/vm.sh -r $d stop >/dev/null 2>&1; rm -rf $d
  done
  echo "    rc=$rc $(grep -c -e 'Oops' -e 'BUG:' -e 'Kernel panic' $OUT/$TAG-$K-$i.console.log 2>/dev/null) oops-lines; $(grep -E '^(--- |ok|FAIL)' $log | tr '\n' ' ')" >> $OUT/summary.txt
done
