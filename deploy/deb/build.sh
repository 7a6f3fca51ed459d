#!/bin/bash
# Build the nvmetd Debian package with dpkg-deb (make deb).
#
#   deploy/deb/build.sh [OUTDIR]      default OUTDIR: dist/
#
# The package holds /usr/sbin/nvmetd, /usr/sbin/nvmetctl, /usr/bin/nvmeof,
# /usr/bin/iwping, the
# systemd unit, /etc/nvmetd/nvmetd.yaml (a conffile: dpkg keeps the admin's
# edits), man pages and bash/zsh completions generated from the programs'
# own flag definitions (deploy/deb/gendocs), LICENSE and copyright, and the
# changelog. Version: `git describe` (tags vX.Y.Z), or VERSION=.
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
install -D -m 0644 "$src/configs/nvmetd.yaml" "$root/etc/nvmetd/nvmetd.yaml"
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
	# The namespaces' data of the example configuration and the default
	# subsystem UUID; the configuration itself is a conffile dpkg removes.
	rm -rf /var/lib/nvmetd /etc/nvmetd
fi
exit 0
SH
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"

mkdir -p "$out"
deb=$out/nvmetd_${DEBVER}_${ARCH}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
