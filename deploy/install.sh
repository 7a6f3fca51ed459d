#!/bin/sh
# Install (or uninstall) nvmetd: the binary, the systemd unit and the
# example configuration. Run from a source checkout, as root for a real
# installation, or with DESTDIR for packaging.
#
#   sudo deploy/install.sh                    # build, install, systemctl daemon-reload
#   sudo deploy/install.sh --uninstall        # remove binary and unit, keep config and data
#   DESTDIR=/tmp/pkg deploy/install.sh --prefix /usr --unitdir /usr/lib/systemd/system
set -eu

prog=$(basename "$0")
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)

prefix=/usr/local
sysconfdir=/etc
unitdir=/etc/systemd/system
statedir=/var/lib/nvmetd
binary=
uninstall=0
purge=0
systemctl=1
DESTDIR=${DESTDIR:-}
GO=${GO:-go}

usage() {
	cat <<EOF
usage: $prog [options]

Installs:
  PREFIX/sbin/nvmetd                 the daemon (built from this checkout unless --binary)
  PREFIX/sbin/nvmetctl               its management CLI (beside --binary, else built)
  PREFIX/bin/nvmeof, PREFIX/bin/iwping  the host tool and the engine check (beside
                                     --binary, else built)
  UNITDIR/nvmetd.service             the systemd unit
  SYSCONFDIR/nvmetd/nvmetd.yaml      the example configuration, only if absent
                                     (otherwise as nvmetd.yaml.example)

options:
  --prefix DIR       installation prefix (default $prefix)
  --sysconfdir DIR   configuration root (default $sysconfdir)
  --unitdir DIR      systemd unit directory (default $unitdir)
  --binary FILE      install FILE instead of building
  --uninstall        remove the binary and the unit; keep configuration and data
  --purge            with --uninstall, also remove SYSCONFDIR/nvmetd and $statedir
  --no-systemctl     never run systemctl
  -h, --help         this help

environment:
  DESTDIR            staging root for packages; systemctl is not run when set
  GO                 the go command (default go)
EOF
}

die() {
	echo "$prog: $*" >&2
	exit 1
}

while [ $# -gt 0 ]; do
	case $1 in
	--prefix) [ $# -ge 2 ] || die "$1 needs a value"; prefix=$2; shift 2 ;;
	--prefix=*) prefix=${1#*=}; shift ;;
	--sysconfdir) [ $# -ge 2 ] || die "$1 needs a value"; sysconfdir=$2; shift 2 ;;
	--sysconfdir=*) sysconfdir=${1#*=}; shift ;;
	--unitdir) [ $# -ge 2 ] || die "$1 needs a value"; unitdir=$2; shift 2 ;;
	--unitdir=*) unitdir=${1#*=}; shift ;;
	--binary) [ $# -ge 2 ] || die "$1 needs a value"; binary=$2; shift 2 ;;
	--binary=*) binary=${1#*=}; shift ;;
	--uninstall) uninstall=1; shift ;;
	--purge) purge=1; shift ;;
	--no-systemctl) systemctl=0; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown option: $1" ;;
	esac
done
[ "$purge" = 0 ] || [ "$uninstall" = 1 ] || die "--purge only goes with --uninstall"
for d in "$prefix" "$sysconfdir" "$unitdir"; do
	case $d in /*) ;; *) die "directories must be absolute: $d" ;; esac
done

sbin=$prefix/sbin
bindir=$prefix/bin
bin_dst=$DESTDIR$sbin/nvmetd
unit_dst=$DESTDIR$unitdir/nvmetd.service
conf_dir=$DESTDIR$sysconfdir/nvmetd
conf_dst=$conf_dir/nvmetd.yaml

# systemctl runs only on a live systemd, for a real (non-DESTDIR) install.
use_systemctl() {
	[ "$systemctl" = 1 ] && [ -z "$DESTDIR" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1
}

if [ "$uninstall" = 1 ]; then
	if use_systemctl; then
		systemctl disable --now nvmetd.service 2>/dev/null || true
	fi
	rm -f "$unit_dst" "$bin_dst" "$DESTDIR$sbin/nvmetctl" "$DESTDIR$bindir/nvmeof" "$DESTDIR$bindir/iwping"
	echo "removed $unit_dst"
	echo "removed $bin_dst $DESTDIR$sbin/nvmetctl $DESTDIR$bindir/nvmeof $DESTDIR$bindir/iwping"
	if [ "$purge" = 1 ]; then
		rm -rf "$conf_dir" "$DESTDIR$statedir"
		echo "removed $conf_dir and $DESTDIR$statedir"
	else
		echo "kept $conf_dir and $DESTDIR$statedir (remove them with --uninstall --purge)"
	fi
	if use_systemctl; then
		systemctl daemon-reload
	fi
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

if [ -z "$binary" ]; then
	if [ -f "$src/Makefile" ] && make -C "$src" -n build >/dev/null 2>&1 && [ -z "${NVMETD_NO_MAKE:-}" ]; then
		echo "building with make build"
		make -C "$src" build >&2
		binary=$src/bin/nvmetd
	else
		version=$(git -C "$src" describe --tags --always --dirty 2>/dev/null || echo dev)
		echo "building nvmetd $version with $GO build"
		(cd "$src" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-X github.com/nvmetd/nvmetd/internal/version.version=$version" -o "$tmp/" ./cmd/nvmetd ./cmd/nvmetctl ./cmd/nvmeof ./cmd/iwping)
		binary=$tmp/nvmetd
	fi
fi
[ -f "$binary" ] || die "no binary at $binary"

install -d -m 0755 "$DESTDIR$sbin" "$DESTDIR$unitdir"
install -m 0755 "$binary" "$bin_dst"
echo "installed $bin_dst"
if [ -f "$(dirname "$binary")/nvmetctl" ]; then
	install -m 0755 "$(dirname "$binary")/nvmetctl" "$DESTDIR$sbin/nvmetctl"
	echo "installed $DESTDIR$sbin/nvmetctl"
fi
for tool in nvmeof iwping; do
	if [ -f "$(dirname "$binary")/$tool" ]; then
		install -d -m 0755 "$DESTDIR$bindir"
		install -m 0755 "$(dirname "$binary")/$tool" "$DESTDIR$bindir/$tool"
		echo "installed $DESTDIR$bindir/$tool"
	else
		echo "no $tool beside $binary: not installed"
	fi
done

# The unit names the binary and the configuration file by path.
sed -e "s#/usr/local/sbin/nvmetd#$sbin/nvmetd#g" \
	-e "s#/etc/nvmetd/nvmetd.yaml#$sysconfdir/nvmetd/nvmetd.yaml#g" \
	"$here/nvmetd.service" >"$tmp/nvmetd.service"
install -m 0644 "$tmp/nvmetd.service" "$unit_dst"
echo "installed $unit_dst"

install -d -m 0755 "$conf_dir"
if [ -e "$conf_dst" ]; then
	install -m 0640 "$src/configs/nvmetd.yaml" "$conf_dst.example"
	echo "kept $conf_dst; the current example is $conf_dst.example"
else
	install -m 0640 "$src/configs/nvmetd.yaml" "$conf_dst"
	echo "installed $conf_dst"
fi

# Check the configuration with the installed binary (it touches nothing).
if "$bin_dst" --check-config --config "$conf_dst" >/dev/null 2>"$tmp/check"; then
	echo "checked $conf_dst: valid"
else
	echo "$prog: warning: $conf_dst does not pass nvmetd --check-config:" >&2
	cat "$tmp/check" >&2
fi

if use_systemctl; then
	systemctl daemon-reload
	echo "ran systemctl daemon-reload"
	echo "next: edit $sysconfdir/nvmetd/nvmetd.yaml, then: systemctl enable --now nvmetd"
fi
