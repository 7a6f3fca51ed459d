#!/bin/bash
# Captures a kernel-to-kernel NVMe/TCP exchange (nvme-tcp host, nvmet-tcp
# target, over the guest's lo) in the lab VM, once without and once with
# header and data digests, and once with SQ flow control disabled
# (--disable-sqflow), into ../golden/linux-<kver>-{plain,digest,sqflow}.pcap.
# The golden tests (golden_test.go) read the PDUs out of these captures.
#
#   nvmeof/tcp/testdata/capture/capture.sh [6.1|6.12]
#
# Needs the lab (test/lab/setup.sh, root).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../../../.." && pwd)
VM="$ROOT/test/lab/vm.sh -n tcpcap -k ${1:-6.1}"
OUT=$HERE/../golden
mkdir -p "$OUT"
LAB_FWD="" LAB_SIW=none $VM start
trap '$VM stop' EXIT
kver=$($VM exec 'uname -r' | tr -d '\r')
for mode in ${MODES:-plain digest sqflow}; do
	$VM run -t 180 "$HERE/guest.sh" "$mode"
	$VM get "/host/out/nvme-tcp-$mode.pcap" "$OUT/linux-${kver%%-*}-$mode.pcap"
done
ls -l "$OUT"
