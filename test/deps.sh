#!/usr/bin/env bash
# test/deps.sh: install the Debian/Ubuntu packages the test suite uses beyond
# Go, if any is missing (`make test` runs it first). As root it installs with
# apt-get; otherwise it names what is missing and fails.
#
# gcc and libc6-dev: cgo, which go test -race needs. The end-to-end tests use
# real tools: ip and ss (network namespaces, routed tests), nft (the gateway
# tests' partitions: nftables rules in a gateway's namespace), tcpdump (FPDU
# sizes on a 1500-byte path), losetup, mount and mkfs.ext4 (loop devices and
# filesystems over FUSE), nsenter, prlimit (test/hostile runs the daemon
# with 512 file descriptors), fio (the FUSE+loop stress test),
# systemd-analyze (the unit's verification), nvme-cli (DH-HMAC-CHAP keys
# checked against nvme gen-dhchap-key/check-dhchap-key), python3 (the
# Linux reference peer of nvmeof/auth/testdata/linuxref.py) and tshark (wire
# traces must dissect as iWARP and NVMe-oF), librbd-dev and librados-dev
# (make deb builds the nvmetd-rbd package with them, which TestDebPackage
# installs and checks) and dpkg-dev (dpkg-shlibdeps computes that package's
# library dependencies). The lab VM's
# own packages (qemu, the guest kernel) are installed by test/lab/setup.sh,
# which the interop tests run; the Ceph cluster's packages (ceph-mon,
# ceph-osd, ceph-common; librbd-dev and librados-dev again) by
# test/ceph/cluster.sh, which make test-rbd runs.
set -euo pipefail

need=()
command -v gcc >/dev/null 2>&1 || need+=(gcc)
[ -e /usr/include/stdio.h ] || need+=(libc6-dev)
for tool in ip:iproute2 ss:iproute2 tcpdump:tcpdump losetup:mount mount:mount mkfs.ext4:e2fsprogs \
	nsenter:util-linux prlimit:util-linux fio:fio systemd-analyze:systemd nvme:nvme-cli python3:python3 tshark:tshark \
	dpkg-shlibdeps:dpkg-dev nft:nftables; do
	command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
[ -e /usr/include/rbd/librbd.h ] || need+=(librbd-dev)
[ -e /usr/include/rados/librados.h ] || need+=(librados-dev)
[ ${#need[@]} -gt 0 ] || exit 0
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
if [ "$(id -u)" != 0 ]; then
	echo "test/deps.sh: missing packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
	exit 1
fi
echo "test/deps.sh: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${need[@]}"
