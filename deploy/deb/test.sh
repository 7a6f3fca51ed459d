#!/bin/bash
# Install the nvmetd package into a clean Debian root and use it (make
# deb-test; root). The root is made by debootstrap from Debian's archive
# (the suite of this machine, minbase) once and cached as a tarball in
# $NVMETD_DEB_CACHE (default /var/cache/nvmetd-deb-test); every run
# unpacks a fresh copy into a directory of its own, removed at the end.
#
#   deploy/deb/test.sh PACKAGE.deb
#
# It checks: dpkg -i succeeds with only the package's dependencies;
# `nvmetd --check-config` on the shipped configuration and `--version` of
# nvmetd, nvmetctl, nvmeof and iwping; the man pages and completions are installed;
# dpkg -r removes every file but the conffile; dpkg -P removes that too and
# leaves the root as it was before the install.
set -euo pipefail

deb=$(realpath "${1:?usage: $0 PACKAGE.deb}")
[ "$(id -u)" = 0 ] || { echo "$0: needs root (debootstrap, chroot)" >&2; exit 1; }
cache=${NVMETD_DEB_CACHE:-/var/cache/nvmetd-deb-test}
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
tarball=$cache/$suite-minbase.tar

if [ ! -s "$tarball" ]; then
	command -v debootstrap >/dev/null || apt-get install -y debootstrap >/dev/null
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/build.XXXXXX")
	echo "debootstrap $suite (minbase) from $mirror (once; cached in $tarball)"
	debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
		{ tail -20 "$cache/debootstrap.log"; rm -rf "$tmp"; exit 1; }
	tar -C "$tmp" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
	rm -rf "$tmp"
fi

root=$(mktemp -d /tmp/nvmetd-deb-root.XXXXXX)
cleanup() {
	umount "$root/proc" 2>/dev/null || true
	rm -rf "$root"
}
trap cleanup EXIT
tar -C "$root" -xf "$tarball"
mount -t proc proc "$root/proc"
pass=0 fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }

listing() { (cd "$root" && find . -xdev -path ./proc -prune -o -path ./tmp -prune -o -path ./var/cache -prune -o -path ./var/log -prune -o -print | sort); }
listing >"$root/../before.$$"
before=$root/../before.$$

cp "$deb" "$root/tmp/nvmetd.deb"
# Dependencies from the clean root's own packages only (util-linux and
# mount are essential in Debian).
if in_root dpkg -i /tmp/nvmetd.deb >/tmp/nvmetd-deb-install.log 2>&1; then ok "dpkg -i"; else bad "dpkg -i: $(tail -5 /tmp/nvmetd-deb-install.log)"; fi
rm -f "$root/tmp/nvmetd.deb"

if out=$(in_root nvmetd --check-config --config /etc/nvmetd/nvmetd.yaml 2>&1 >/dev/null) && [[ $out == *"the configuration is valid"* ]]; then
	ok "nvmetd --check-config on the shipped configuration"
else
	bad "nvmetd --check-config: $out"
fi
for p in nvmetd nvmetctl nvmeof iwping; do
	if v=$(in_root "$p" --version) && [[ $v == "$p "* ]]; then ok "$p --version: $v"; else bad "$p --version: $v"; fi
done
for f in /usr/share/man/man8/nvmetd.8.gz /usr/share/man/man8/nvmeof.8.gz /usr/share/man/man1/iwping.1.gz \
	/usr/share/man/man8/nvmetctl.8.gz /usr/share/bash-completion/completions/nvmetctl /usr/share/zsh/vendor-completions/_nvmetctl \
	/usr/share/bash-completion/completions/nvmeof /usr/share/zsh/vendor-completions/_nvmeof \
	/lib/systemd/system/nvmetd.service /usr/share/doc/nvmetd/copyright; do
	if [ -s "$root$f" ]; then ok "installed $f"; else bad "missing $f"; fi
done
if grep -q '^ExecStart=/usr/sbin/nvmetd ' "$root/lib/systemd/system/nvmetd.service"; then ok "unit runs /usr/sbin/nvmetd"; else bad "unit ExecStart"; fi
if zcat "$root/usr/share/man/man8/nvmeof.8.gz" | grep -q 'nvmeof disconnect'; then ok "nvmeof(8) lists the commands"; else bad "nvmeof(8) lacks the commands"; fi
if bash -n "$root/usr/share/bash-completion/completions/nvmeof"; then ok "bash completion parses"; else bad "bash completion syntax"; fi
if zcat "$root/usr/share/man/man8/nvmetctl.8.gz" | grep -q 'nvmetctl namespace'; then ok "nvmetctl(8) lists the commands"; else bad "nvmetctl(8) lacks the commands"; fi
if bash -n "$root/usr/share/bash-completion/completions/nvmetctl"; then ok "nvmetctl bash completion parses"; else bad "nvmetctl bash completion syntax"; fi

# The conffile survives remove, and an edit survives it too.
echo "# edited by the admin" >>"$root/etc/nvmetd/nvmetd.yaml"
if in_root dpkg -r nvmetd >/tmp/nvmetd-deb-remove.log 2>&1; then ok "dpkg -r"; else bad "dpkg -r: $(tail -5 /tmp/nvmetd-deb-remove.log)"; fi
for f in /usr/sbin/nvmetd /usr/sbin/nvmetctl /usr/bin/nvmeof /usr/bin/iwping /lib/systemd/system/nvmetd.service; do
	if [ -e "$root$f" ]; then bad "$f left after remove"; fi
done
if grep -q 'edited by the admin' "$root/etc/nvmetd/nvmetd.yaml" 2>/dev/null; then ok "remove keeps the edited conffile"; else bad "remove lost the conffile"; fi
if in_root dpkg -P nvmetd >/tmp/nvmetd-deb-purge.log 2>&1; then ok "dpkg -P"; else bad "dpkg -P: $(tail -5 /tmp/nvmetd-deb-purge.log)"; fi
listing >"$root/../after.$$"
if d=$(diff "$before" "$root/../after.$$" | grep -v '^[0-9]' | grep -v 'var/lib/dpkg'); then
	bad "left behind after purge:"$'\n'"$d"
else
	ok "purge leaves the root as before the install"
fi
rm -f "$before" "$root/../after.$$"
echo "deb-test: $pass passed, $fail failed"
[ "$fail" = 0 ]
