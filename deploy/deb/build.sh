#!/bin/bash
# Build the nvmetd Debian packages with dpkg-deb (make deb).
#
#   deploy/deb/build.sh [OUTDIR]      default OUTDIR: dist/
#
# nvmetd (always): static binaries. The package holds /usr/sbin/nvmetd, /usr/sbin/nvmetctl, /usr/bin/nvmeof,
# /usr/bin/iwping, the
# systemd units (nvmetd.service; nvmeof-autoconnect.service, the host's
# boot-time connections), /etc/nvmetd/nvmetd.yaml (a conffile: dpkg keeps the admin's
# edits), the operations kit under /usr/share/nvmetd (grafana/ dashboard,
# prometheus/ alert rules, wireshark/nvmeof-iwarp.lua dissector), the example
# configurations (nvmetd.yaml, nvmetd-auth.yaml, nvmetd-gateway.yaml) under
# /usr/share/doc/nvmetd/examples, with the source tree's paths in their
# comments rewritten to the installed ones, man pages and bash/zsh completions generated from the programs'
# own flag definitions (deploy/deb/gendocs), LICENSE and copyright, and the
# changelog. Version: `git describe` (tags vX.Y.Z), or VERSION=.
#
# nvmetd-rbd (when librbd-dev and librados-dev are installed): the daemon
# built with cgo and the rbd tags (make rbd-tags), i.e. with the Ceph RBD
# backend and the gateway group, as /usr/sbin/nvmetd-rbd, with the unit
# nvmetd-rbd.service (same configuration as nvmetd.service, which it
# conflicts with), the example configs/nvmetd-gateway.yaml under
# /usr/share/doc/nvmetd-rbd/examples and nvmetd-rbd(8) as a link to
# nvmetd(8). Depends: nvmetd of the same version, and librbd1/librados2 as
# dpkg-shlibdeps computes them. Without the Ceph headers it is skipped
# (said so; exit 0) unless NVMETD_DEB_RBD=1 demands it; NVMETD_DEB_RBD=0
# skips it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
out=${1:-$src/dist}
GO=${GO:-go}

gitver=$(git -C "$src" describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null || echo dev)
VERSION=${VERSION:-$gitver}
# Debian version: v0.1.0 -> 0.1.0; v0.1.0-3-gabc -> 0.1.0+git3.gabc;
# no tag (just a hash) -> 0.0.0+gitN.gHASH; -rc.1 -> ~rc.1.
debver() {
	local v=${1#v}
	local dirty=
	case $v in *-dirty) dirty=.dirty; v=${v%-dirty} ;; esac
	if [[ $v =~ ^([0-9]+\.[0-9]+\.[0-9]+)(-([a-z]+[.0-9]*))?-([0-9]+)-g([0-9a-f]+)$ ]]; then
		local pre=${BASH_REMATCH[3]:+~${BASH_REMATCH[3]}}
		echo "${BASH_REMATCH[1]}$pre+git${BASH_REMATCH[4]}.g${BASH_REMATCH[5]}$dirty"
	elif [[ $v =~ ^([0-9]+\.[0-9]+\.[0-9]+)(-([a-z]+[.0-9]*))?$ ]]; then
		echo "${BASH_REMATCH[1]}${BASH_REMATCH[3]:+~${BASH_REMATCH[3]}}$dirty"
	elif [[ $v =~ ^[0-9a-f]{7,}$ ]]; then
		echo "0.0.0+git$(git -C "$src" rev-list --count HEAD 2>/dev/null || echo 0).g$v$dirty"
	else
		echo "0.0.0+$(echo "$v" | tr -c 'A-Za-z0-9.+~\n' .)$dirty"
	fi
}
DEBVER=$(debver "$VERSION")
ARCH=$(dpkg --print-architecture)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$src" log -1 --format=%ct 2>/dev/null || date +%s)}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
bin=$work/bin
mkdir -p "$bin"
echo "building nvmetd $VERSION (Debian version $DEBVER, $ARCH)"
(cd "$src" && CGO_ENABLED=0 "$GO" build -trimpath \
	-ldflags "-s -w -X github.com/nvmetd/nvmetd/internal/version.version=$VERSION" -o "$bin/" ./cmd/nvmetd ./cmd/nvmetctl ./cmd/nvmeof ./cmd/iwping)
(cd "$src" && "$GO" run ./deploy/deb/gendocs -out "$work/docs" -version "$VERSION" "$bin")

install -D -m 0755 "$bin/nvmetd" "$root/usr/sbin/nvmetd"
install -D -m 0755 "$bin/nvmetctl" "$root/usr/sbin/nvmetctl"
install -D -m 0755 "$bin/nvmeof" "$root/usr/bin/nvmeof"
install -D -m 0755 "$bin/iwping" "$root/usr/bin/iwping"
install -d -m 0755 "$root/lib/systemd/system"
sed -e 's|/usr/local/sbin/nvmetd|/usr/sbin/nvmetd|' -e 's|^# Installed by deploy/install.sh.|# Installed by the nvmetd package.|' \
	"$src/deploy/nvmetd.service" > "$root/lib/systemd/system/nvmetd.service"
chmod 0644 "$root/lib/systemd/system/nvmetd.service"
# The operations kit (issue 23.8), where the package puts it:
share=/usr/share/nvmetd
examples=/usr/share/doc/nvmetd/examples
# installed rewrites the source tree's paths in a shipped text to the
# installed ones (the comments of the configuration and the examples, the
# autoconnect unit's binary and install line), so that nothing the package
# installs points into a source checkout.
installed() {
	sed -e "s|configs/nvmetd-auth\.yaml|$examples/nvmetd-auth.yaml|g" \
		-e "s|configs/nvmetd-gateway\.yaml|$examples/nvmetd-gateway.yaml|g" \
		-e "s|configs/nvmetd\.yaml|$examples/nvmetd.yaml|g" \
		-e "s|deploy/grafana|$share/grafana|g" \
		-e "s|deploy/prometheus|$share/prometheus|g" \
		-e "s|deploy/wireshark/nvmeof-iwarp\.lua|$share/wireshark/nvmeof-iwarp.lua|g" \
		-e "s|\bdocs/\([a-z-]*\)\.md|https://github.com/nvmetd/nvmetd/blob/main/docs/\1.md|g" \
		-e 's|/usr/local/bin/nvmeof|/usr/bin/nvmeof|g' \
		-e 's|^# Install: cp deploy/nvmeof-autoconnect.service /etc/systemd/system/ &&$|# Installed by the nvmetd package; enable it with|' \
		-e 's|^#          systemctl enable nvmeof-autoconnect.service$|#   systemctl enable nvmeof-autoconnect.service|' \
		"$1"
}
# 0640 root:root: the file may come to hold literal DH-HMAC-CHAP secrets.
install -d -m 0755 "$root/etc/nvmetd"
installed "$src/configs/nvmetd.yaml" >"$root/etc/nvmetd/nvmetd.yaml"
chmod 0640 "$root/etc/nvmetd/nvmetd.yaml"
# The host's boot-time connections (nvme-cli's nvmf-autoconnect for
# nvmeof); not enabled by the package.
installed "$src/deploy/nvmeof-autoconnect.service" >"$root/lib/systemd/system/nvmeof-autoconnect.service"
chmod 0644 "$root/lib/systemd/system/nvmeof-autoconnect.service"
grep -q '^ExecStart=/usr/bin/nvmeof autoconnect$' "$root/lib/systemd/system/nvmeof-autoconnect.service" ||
	{ echo "nvmeof-autoconnect.service: ExecStart not rewritten to /usr/bin/nvmeof (deploy/nvmeof-autoconnect.service changed?)" >&2; exit 1; }
# Grafana dashboard, Prometheus alert rules, Wireshark dissector (the path
# nvmetd trace --help names), example configurations.
install -D -m 0644 "$src/deploy/grafana/nvmetd-dashboard.json" "$root$share/grafana/nvmetd-dashboard.json"
install -D -m 0644 "$src/deploy/prometheus/nvmetd-rules.yml" "$root$share/prometheus/nvmetd-rules.yml"
install -D -m 0644 "$src/deploy/wireshark/nvmeof-iwarp.lua" "$root$share/wireshark/nvmeof-iwarp.lua"
install -d -m 0755 "$root$examples"
for ex in nvmetd.yaml nvmetd-auth.yaml nvmetd-gateway.yaml; do
	installed "$src/configs/$ex" >"$root$examples/$ex"
	chmod 0644 "$root$examples/$ex"
done
# Nothing shipped may point into the source tree.
if left=$(grep -rnE '(^|[^/a-z])(configs|deploy)/[a-z]|/usr/local/' "$root/etc/nvmetd" "$root$examples" \
	"$root/lib/systemd/system/nvmeof-autoconnect.service" "$root/lib/systemd/system/nvmetd.service"); then
	echo "shipped files still point into the source tree or /usr/local:" >&2
	echo "$left" >&2
	exit 1
fi
for m in "$work"/docs/man/*; do
	sec=${m##*.}
	install -D -m 0644 "$m" "$root/usr/share/man/man$sec/$(basename "$m")"
	gzip -9n "$root/usr/share/man/man$sec/$(basename "$m")"
done
for c in "$work"/docs/bash-completion/*; do
	install -D -m 0644 "$c" "$root/usr/share/bash-completion/completions/$(basename "$c")"
done
for c in "$work"/docs/zsh/*; do
	install -D -m 0644 "$c" "$root/usr/share/zsh/vendor-completions/$(basename "$c")"
done
doc=$root/usr/share/doc/nvmetd
install -D -m 0644 "$src/LICENSE" "$doc/LICENSE"
install -m 0644 "$src/README.md" "$doc/README.md"
gzip -9nc "$src/CHANGELOG.md" > "$doc/changelog.gz"
cat > "$doc/copyright" <<COPY
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: nvmetd
Source: https://github.com/nvmetd/nvmetd

Files: *
Copyright: 2024-$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y) The nvmetd authors
License: Apache-2.0

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License"); you may not
 use this file except in compliance with the License. On Debian systems the
 full text is in /usr/share/common-licenses/Apache-2.0 and in
 /usr/share/doc/nvmetd/LICENSE. The binaries also contain Go modules under
 BSD-3-Clause, MIT and Apache-2.0 licenses (go.uber.org/zap, spf13/viper,
 spf13/pflag, spf13/cobra, hanwen/go-fuse, coreos/go-systemd, dswarbrick/smart,
 golang.org/x/sys and their dependencies); see go.mod for the list.
COPY
chmod 0644 "$doc/copyright"
# Directories the package owns (the unit's StateDirectory makes
# /var/lib/nvmetd too; the example configuration's namespace lives there).
install -d -m 0700 "$root/var/lib/nvmetd"

install -d -m 0755 "$root/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CTRL
Package: nvmetd
Version: $DEBVER
Architecture: $ARCH
Maintainer: nvmetd developers <nvmetd@example.org>
Installed-Size: $size
Depends: util-linux, mount
Recommends: e2fsprogs, fuse3 | fuse
Suggests: nvme-cli, rdma-core
Section: admin
Priority: optional
Homepage: https://github.com/nvmetd/nvmetd
Description: NVMe over Fabrics target and host over user-space iWARP on TCP
 nvmetd exports files, block devices and memory as NVMe namespaces over
 NVMe-oF with the RDMA transport, where RDMA is nvmetd's own iWARP engine
 (RFC 5040/5041/5044/6581) in pure Go over ordinary TCP: no RDMA NIC, no
 kernel module. Linux hosts connect with nvme connect -t rdma over
 soft-iWARP (siw); nvmeof is the host tool for machines without it (FUSE,
 loop device, mount). nvmetctl manages a running nvmetd (nvmetcli's and
 SPDK rpc.py's vocabulary, nvmetcli config.json import and export). iwping
 is an rping-compatible check of the engine.
CTRL
echo /etc/nvmetd/nvmetd.yaml > "$root/DEBIAN/conffiles"
cat > "$root/DEBIAN/postinst" <<'SH'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	# Not enabled or started: check /etc/nvmetd/nvmetd.yaml first
	# (nvmetd --check-config), then systemctl enable --now nvmetd.
fi
exit 0
SH
cat > "$root/DEBIAN/prerm" <<'SH'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl stop nvmetd.service >/dev/null 2>&1 || true
	systemctl disable nvmetd.service >/dev/null 2>&1 || true
	# Not stopped: its connections (nvmeof daemons) outlive the oneshot
	# unit and may hold mounted filesystems.
	systemctl disable nvmeof-autoconnect.service >/dev/null 2>&1 || true
fi
exit 0
SH
cat > "$root/DEBIAN/postrm" <<'SH'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
if [ "$1" = purge ]; then
	# dpkg has removed the conffile (/etc/nvmetd/nvmetd.yaml). The data
	# stays, as Debian leaves a database's files: namespace images, the
	# default subsystem's UUID and host key in /var/lib/nvmetd, and the keys
	# and certificates an admin keeps beside the configuration.
	rmdir /etc/nvmetd 2>/dev/null || true
	kept=
	[ ! -d /var/lib/nvmetd ] || kept="/var/lib/nvmetd (namespace images, keys)"
	[ ! -d /etc/nvmetd ] || kept="${kept:+$kept and }/etc/nvmetd (what is left in it: keys, certificates)"
	if [ -n "$kept" ]; then
		echo "nvmetd: purge keeps the data: $kept; remove it by hand once it is no longer needed" >&2
	fi
fi
exit 0
SH
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"

mkdir -p "$out"
deb=$out/nvmetd_${DEBVER}_${ARCH}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"

# nvmetd-rbd.
want_rbd=${NVMETD_DEB_RBD:-auto}
[ "$want_rbd" = 0 ] && { echo "nvmetd-rbd: not built (NVMETD_DEB_RBD=0)"; exit 0; }
missing=()
# (LIBRBD_H, LIBRADOS_H: the headers looked for, as in the Makefile.)
[ -e "${LIBRBD_H:-/usr/include/rbd/librbd.h}" ] || missing+=(librbd-dev)
[ -e "${LIBRADOS_H:-/usr/include/rados/librados.h}" ] || missing+=(librados-dev)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
if [ ${#missing[@]} -gt 0 ]; then
	msg="nvmetd-rbd: not built: ${missing[*]} not installed (apt-get install ${missing[*]}; test/deps.sh installs them)"
	if [ "$want_rbd" = 1 ]; then
		echo "$msg, and NVMETD_DEB_RBD=1 demands it" >&2
		exit 1
	fi
	echo "$msg"
	exit 0
fi
tags=$(make -s -C "$src" --no-print-directory rbd-tags)
echo "building nvmetd-rbd $VERSION (-tags $tags, cgo; links librbd1, librados2)"
(cd "$src" && CGO_ENABLED=1 "$GO" build -trimpath -tags "$tags" \
	-ldflags "-s -w -X github.com/nvmetd/nvmetd/internal/version.version=$VERSION" -o "$bin/nvmetd-rbd" ./cmd/nvmetd)

rroot=$work/rbdroot
install -D -m 0755 "$bin/nvmetd-rbd" "$rroot/usr/sbin/nvmetd-rbd"
# The library dependencies: dpkg-shlibdeps wants a debian/control to run
# in, even one that names nothing; it reads the libraries' shlibs and
# symbols files. If it cannot, the upstream versions of the installed
# libraries (what the binary was linked against) are the minimum.
shl=$work/shlibdeps
mkdir -p "$shl/debian"
printf 'Source: nvmetd\n\nPackage: nvmetd-rbd\nArchitecture: any\n' >"$shl/debian/control"
if libdeps=$(cd "$shl" && dpkg-shlibdeps -O "$rroot/usr/sbin/nvmetd-rbd" 2>"$work/shlibdeps.log") &&
	libdeps=${libdeps#shlibs:Depends=} && [[ $libdeps == *librbd1* && $libdeps == *librados2* ]]; then
	echo "nvmetd-rbd: dpkg-shlibdeps: $libdeps"
else
	cat "$work/shlibdeps.log" >&2 || true
	upver() { dpkg-query -W -f='${Version}' "$1" | sed -E 's/^[0-9]+://; s/^([0-9]+\.[0-9]+).*/\1/'; }
	libdeps="libc6, librbd1 (>= $(upver librbd1)), librados2 (>= $(upver librados2))"
	echo "nvmetd-rbd: dpkg-shlibdeps failed; from the installed libraries: $libdeps"
fi

# The unit: nvmetd.service with the rbd-enabled binary, conflicting with
# nvmetd.service (one of the two serves /etc/nvmetd/nvmetd.yaml).
install -d -m 0755 "$rroot/lib/systemd/system"
sed -e 's|^ExecStart=/usr/local/sbin/nvmetd |ExecStart=/usr/sbin/nvmetd-rbd |' \
	-e 's|^ExecReload=/usr/local/sbin/nvmetd |ExecReload=/usr/sbin/nvmetd-rbd |' \
	-e 's|^# Installed by deploy/install.sh.|# Installed by the nvmetd-rbd package: nvmetd built with the Ceph RBD backend\
# and the gateway group (docs/rbd.md), on the configuration nvmetd.service\
# uses. Run one of the two: systemctl disable --now nvmetd; systemctl\
# enable --now nvmetd-rbd. A gateway fenced by its group exits 75 and is\
# restarted (Restart=on-failure) with new Ceph clients.|' \
	-e 's|systemctl edit nvmetd$|systemctl edit nvmetd-rbd|' \
	-e 's|^Description=.*|Description=nvmetd NVMe-oF target with Ceph RBD and gateway group (nvmetd-rbd)|' \
	-e 's|^Documentation=.*|&\nDocumentation=file:/usr/share/doc/nvmetd-rbd/README.Debian\nConflicts=nvmetd.service|' \
	"$src/deploy/nvmetd.service" >"$rroot/lib/systemd/system/nvmetd-rbd.service"
chmod 0644 "$rroot/lib/systemd/system/nvmetd-rbd.service"
grep -q '^ExecStart=/usr/sbin/nvmetd-rbd ' "$rroot/lib/systemd/system/nvmetd-rbd.service" ||
	{ echo "nvmetd-rbd.service: ExecStart not rewritten (deploy/nvmetd.service changed?)" >&2; exit 1; }
# The flags are nvmetd's: nvmetd-rbd(8) is nvmetd(8) (in nvmetd, which this
# package depends on).
install -d -m 0755 "$rroot/usr/share/man/man8"
ln -s nvmetd.8.gz "$rroot/usr/share/man/man8/nvmetd-rbd.8.gz"
rdoc=$rroot/usr/share/doc/nvmetd-rbd
install -D -m 0644 "$src/configs/nvmetd-gateway.yaml" "$rdoc/examples/nvmetd-gateway.yaml"
install -m 0644 "$doc/copyright" "$rdoc/copyright"
cat >>"$rdoc/copyright" <<'COPY'
 nvmetd-rbd also contains github.com/ceph/go-ceph (MIT) and links
 dynamically against librbd and librados (Ceph, LGPL-2.1 or LGPL-3).
COPY
gzip -9nc "$src/CHANGELOG.md" >"$rdoc/changelog.gz"
cat >"$rdoc/README.Debian" <<'TXT'
nvmetd-rbd for Debian
---------------------

/usr/sbin/nvmetd-rbd is nvmetd built with cgo against librbd/librados: it
adds namespaces of kind rbd (Ceph RBD images) and the gateway group (the
gateway: section). Its flags, environment and configuration are nvmetd's
(nvmetd(8), /etc/nvmetd/nvmetd.yaml); the static nvmetd refuses to start
with a gateway: section (exit 78) and cannot open rbd namespaces.

Run it as a service instead of nvmetd, on the same configuration:

  nvmetd-rbd --check-config --config /etc/nvmetd/nvmetd.yaml
  systemctl disable --now nvmetd.service
  systemctl enable --now nvmetd-rbd.service

The two units conflict (starting one stops the other); nvmetctl talks to
whichever runs. Local settings: systemctl edit nvmetd-rbd, and
/etc/default/nvmetd (read by both).

A gateway group: examples/nvmetd-gateway.yaml here (the Ceph user, the
keyring and the pool it needs are described at its top); the design and
the failure handling are in docs/rbd.md of the source
(https://github.com/nvmetd/nvmetd/blob/main/docs/rbd.md).
TXT
chmod 0644 "$rdoc/README.Debian"

install -d -m 0755 "$rroot/DEBIAN"
rsize=$(du -sk --exclude=DEBIAN "$rroot" | cut -f1)
cat >"$rroot/DEBIAN/control" <<CTRL
Package: nvmetd-rbd
Version: $DEBVER
Architecture: $ARCH
Maintainer: nvmetd developers <nvmetd@example.org>
Installed-Size: $rsize
Depends: nvmetd (= $DEBVER), $libdeps
Section: admin
Priority: optional
Homepage: https://github.com/nvmetd/nvmetd
Description: nvmetd NVMe-oF target with the Ceph RBD backend and gateway group
 nvmetd-rbd is nvmetd (package nvmetd) built against librbd and librados:
 namespaces can be Ceph RBD images, and several nvmetd-rbd gateways can
 serve the same RBD namespaces as one subsystem with one path per gateway,
 each ANA group owned (optimized) by one gateway at a time through a lease
 on a RADOS object, with fencing (OSD blocklist) on failover. It runs on
 nvmetd's configuration, as the unit nvmetd-rbd.service instead of
 nvmetd.service.
CTRL
cat >"$rroot/DEBIAN/postinst" <<'SH'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	# Not enabled or started: see /usr/share/doc/nvmetd-rbd/README.Debian.
fi
exit 0
SH
cat >"$rroot/DEBIAN/prerm" <<'SH'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	systemctl stop nvmetd-rbd.service >/dev/null 2>&1 || true
	systemctl disable nvmetd-rbd.service >/dev/null 2>&1 || true
fi
exit 0
SH
cat >"$rroot/DEBIAN/postrm" <<'SH'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
SH
chmod 0755 "$rroot/DEBIAN/postinst" "$rroot/DEBIAN/prerm" "$rroot/DEBIAN/postrm"
rdeb=$out/nvmetd-rbd_${DEBVER}_${ARCH}.deb
dpkg-deb --root-owner-group -Zxz --build "$rroot" "$rdeb" >/dev/null
echo "$rdeb"
