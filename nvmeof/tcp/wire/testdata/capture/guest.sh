#!/bin/sh
# Guest side of capture.sh: $1 = plain | digest | sqflow (SQ flow control
# disabled: nvmet-tcp folds a read's response into its C2HData, SUCCESS).
MODE=${1:-plain}
NQN=nqn.2024-01.io.nvmetd-lab:tcp-golden
OUT=/host/out/nvme-tcp-$MODE.pcap
set -e
mkdir -p /host/out
ip link set lo up
nvmet.sh teardown >/dev/null 2>&1 || true
NQN=$NQN TRTYPE=tcp TRADDR=127.0.0.1 nvmet.sh setup >/dev/null
rm -f "$OUT"
tcpdump -Z root -i lo -s 0 -U -w "$OUT" "tcp port 4420" >/tmp/tcpdump.log 2>&1 &
TP=$!
sleep 2
DG=""
[ "$MODE" = digest ] && DG="-g -G"
[ "$MODE" = sqflow ] && DG="--disable-sqflow"
set -x
nvme connect -t tcp -a 127.0.0.1 -s 4420 -n $NQN -i 1 $DG
sleep 1
D=$(ls /dev/nvme*n1 | head -n1)
yes "NVMETCP-GOLDEN-PATTERN-0123456789" | head -c 131072 > /tmp/p128k
dd if=/tmp/p128k of=$D bs=4096 count=1 oflag=direct
dd if=/tmp/p128k of=$D bs=131072 count=1 seek=8 oflag=direct
dd if=$D of=/tmp/r4k bs=4096 count=1 iflag=direct
dd if=$D of=/tmp/r128k bs=131072 count=1 skip=8 iflag=direct
cmp /tmp/p128k /tmp/r128k
nvme flush $D -n 1 || true
nvme disconnect -n $NQN
set +x
sleep 1
kill $TP; wait $TP 2>/dev/null || true
cat /tmp/tcpdump.log
nvmet.sh teardown >/dev/null
ls -l "$OUT"
