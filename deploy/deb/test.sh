#!/bin/bash
# Install the nvmetd package into a clean Debian root and use it (make
# deb-test; root). The root is made by debootstrap from Debian's archive
# (the suite of this machine, minbase) once and cached as a tarball in
# $NVMETD_DEB_CACHE (default /var/cache/nvmetd-deb-test); every run
# unpacks a fresh copy into a directory of its own, removed at the end.
#
#   deploy/deb/test.sh NVMETD.deb [NVMETD-RBD.deb]
#
# It checks: dpkg -i succeeds with only the package's dependencies;
# `nvmetd --check-config` on the shipped configuration and `--version` of
# nvmetd, nvmetctl, nvmeof and iwping; the man pages and completions are installed;
# the conffile is 0640 root:root; the operations kit (nvmeof-autoconnect.service
# running /usr/bin/nvmeof, the Grafana dashboard, the Prometheus rules and
# the Wireshark dissector under /usr/share/nvmetd, the example
# configurations under /usr/share/doc/nvmetd/examples) is installed, the
# units run installed binaries, nvmetd trace --help names the installed
# dissector, --check-config names the installed example for an unknown
# key, and no shipped file points into the source tree or /usr/local;
# dpkg -r removes every file but the
# conffile; dpkg -P removes that too and keeps the data (/var/lib/nvmetd:
# namespace images, keys; an admin's key beside the configuration) and
# says so; with the kept data removed by hand, the root is as it was
# before the install.
#
# With NVMETD-RBD.deb too: apt-get (in the root, from Debian's archive)
# installs it with librbd1, librados2 and their dependencies; ldd
# resolves every library of /usr/sbin/nvmetd-rbd; its --version is
# nvmetd's; --check-config accepts the shipped gateway example and refuses
# a broken gateway section; the static nvmetd refuses to start with a
# gateway section (exit 78, EX_CONFIG); the unit and the man page link
# are installed; remove and purge of both packages, then apt-get
# autoremove --purge of the libraries, leave the root as before.
set -euo pipefail

deb=$(realpath "${1:?usage: $0 NVMETD.deb [NVMETD-RBD.deb]}")
rdeb=
[ -z "${2:-}" ] || rdeb=$(realpath "$2")
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
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }

if [ -n "$rdeb" ]; then
	# The package lists first, so that they are part of "before".
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	if in_root apt-get update -q >/tmp/nvmetd-deb-apt.log 2>&1; then ok "apt-get update in the root"; else bad "apt-get update: $(tail -5 /tmp/nvmetd-deb-apt.log)"; fi
fi
listing() { (cd "$root" && find . -xdev -path ./proc -prune -o -path ./tmp -prune -o -path ./var/cache -prune -o -path ./var/log -prune -o -path ./var/lib/apt -prune -o -print | sort); }
listing >"$root/../before.$$"
before=$root/../before.$$

cp "$deb" "$root/tmp/nvmetd.deb"
# Dependencies from the clean root's own packages only (util-linux and
# mount are essential in Debian).
if in_root dpkg -i /tmp/nvmetd.deb >/tmp/nvmetd-deb-install.log 2>&1; then ok "dpkg -i"; else bad "dpkg -i: $(tail -5 /tmp/nvmetd-deb-install.log)"; fi
rm -f "$root/tmp/nvmetd.deb"

if m=$(stat -c '%a %U:%G' "$root/etc/nvmetd/nvmetd.yaml") && [ "$m" = "640 root:root" ]; then
	ok "/etc/nvmetd/nvmetd.yaml is 0640 root:root (it may hold literal secrets)"
else
	bad "/etc/nvmetd/nvmetd.yaml is $m, want 640 root:root"
fi
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

# The operations kit (issue 23.8): each piece installed, the same bytes as
# the source's (or, for texts whose comments name paths, rewritten to the
# installed paths), and pointing at installed paths only.
src=$(cd "$(dirname "$0")/../.." && pwd)
share=/usr/share/nvmetd
examples=/usr/share/doc/nvmetd/examples
for f in grafana/nvmetd-dashboard.json prometheus/nvmetd-rules.yml wireshark/nvmeof-iwarp.lua; do
	if [ -s "$root$share/$f" ] && cmp -s "$root$share/$f" "$src/deploy/$f"; then ok "installed $share/$f"; else bad "missing or different: $share/$f"; fi
done
for f in nvmetd.yaml nvmetd-auth.yaml nvmetd-gateway.yaml; do
	if [ -s "$root$examples/$f" ]; then ok "installed $examples/$f"; else bad "missing $examples/$f"; fi
done
u=$root/lib/systemd/system/nvmeof-autoconnect.service
if grep -q '^ExecStart=/usr/bin/nvmeof autoconnect$' "$u" 2>/dev/null && [ -x "$root/usr/bin/nvmeof" ]; then
	ok "nvmeof-autoconnect.service runs the installed /usr/bin/nvmeof"
else
	bad "nvmeof-autoconnect.service: $(grep '^ExecStart=' "$u" 2>&1)"
fi
# Every ExecStart/ExecReload of the package's units is an installed binary.
for unit in nvmetd.service nvmeof-autoconnect.service; do
	for b in $(sed -n 's/^Exec[A-Za-z]*=[-@+!]*\([^ ]*\).*/\1/p' "$root/lib/systemd/system/$unit"); do
		if [ -x "$root$b" ]; then ok "$unit: $b is installed"; else bad "$unit runs $b, which the package does not install"; fi
	done
done
if out=$(in_root nvmetd trace --help 2>&1) && lua=$(grep -o "$share/wireshark/[a-z.-]*\.lua" <<<"$out" | head -1) && [ -s "$root$lua" ]; then
	ok "nvmetd trace --help names the installed dissector $lua"
else
	bad "nvmetd trace --help does not name an installed dissector: $out"
fi
if left=$(grep -rnE '(^|[^/a-z])(configs|deploy)/[a-z]|/usr/local/' "$root/etc/nvmetd" "$root$examples" "$root$share" \
	"$root/lib/systemd/system/nvmetd.service" "$u"); then
	bad "shipped files point into the source tree or /usr/local:"$'\n'"$left"
else
	ok "no shipped configuration, example, unit or kit file points into the source tree or /usr/local"
fi
printf 'daemon:\n  bogus_setting: 1\n' >"$root/tmp/bogus.yaml"
out=$(in_root nvmetd --check-config --config /tmp/bogus.yaml 2>&1) || true
rm -f "$root/tmp/bogus.yaml"
if [[ $out == *"daemon.bogus_setting: unknown key"* && $out == *"$examples/nvmetd.yaml"* && $out != *configs/* ]] && [ -s "$root$examples/nvmetd.yaml" ]; then
	ok "--check-config of an unknown key names the installed example $examples/nvmetd.yaml"
else
	bad "--check-config of an unknown key: $out"
fi
# The auth example as its comments say to use it: the keys made with the
# installed nvmeof, then --check-config (removed again afterwards).
in_root install -d -m 0700 /etc/nvmetd/keys
for k in app1:01 app2:02 app2.ctrl:02; do
	in_root sh -c "nvmeof gen-dhchap-key -m 1 -n nqn.2014-08.org.nvmexpress:uuid:5d1e5f6a-3b7c-4d0e-9f21-7a0b1c2d3e${k#*:} >/etc/nvmetd/keys/${k%:*}.key && chmod 0600 /etc/nvmetd/keys/${k%:*}.key"
done
if out=$(in_root nvmetd --check-config --config "$examples/nvmetd-auth.yaml" 2>&1 >/dev/null) && [[ $out == *"the configuration is valid"* ]]; then
	ok "nvmetd --check-config on $examples/nvmetd-auth.yaml with keys made as its comments say"
else
	bad "nvmetd --check-config on $examples/nvmetd-auth.yaml: $out"
fi
rm -rf "$root/etc/nvmetd/keys" "$root/var/lib/nvmetd/app-shared.img" "$root/var/lib/nvmetd/app2-private.img"
for f in "$examples/nvmetd.yaml" "$examples/nvmetd-gateway.yaml"; do
	if out=$(in_root nvmetd --check-config --config "$f" 2>&1 >/dev/null) && [[ $out == *"the configuration is valid"* ]]; then
		ok "nvmetd --check-config on $f"
	elif [[ $f == *gateway* && $out == *"Ceph"* ]]; then
		ok "nvmetd --check-config on $f: needs nvmetd-rbd, and says so"
	else
		bad "nvmetd --check-config on $f: $out"
	fi
done
if zcat "$root/usr/share/man/man8/nvmeof.8.gz" | grep -q 'nvmeof disconnect'; then ok "nvmeof(8) lists the commands"; else bad "nvmeof(8) lacks the commands"; fi
if bash -n "$root/usr/share/bash-completion/completions/nvmeof"; then ok "bash completion parses"; else bad "bash completion syntax"; fi
if zcat "$root/usr/share/man/man8/nvmetctl.8.gz" | grep -q 'nvmetctl namespace'; then ok "nvmetctl(8) lists the commands"; else bad "nvmetctl(8) lacks the commands"; fi
if bash -n "$root/usr/share/bash-completion/completions/nvmetctl"; then ok "nvmetctl bash completion parses"; else bad "nvmetctl bash completion syntax"; fi

if [ -n "$rdeb" ]; then
	cp "$rdeb" "$root/tmp/nvmetd-rbd.deb"
	# apt-get resolves librbd1, librados2 and theirs from the archive.
	if in_root apt-get install -y -q --no-install-recommends /tmp/nvmetd-rbd.deb >/tmp/nvmetd-deb-rbd-install.log 2>&1; then
		ok "apt-get install nvmetd-rbd.deb ($(grep -c '^Setting up' /tmp/nvmetd-deb-rbd-install.log) packages set up)"
	else
		bad "apt-get install nvmetd-rbd.deb: $(tail -5 /tmp/nvmetd-deb-rbd-install.log)"
	fi
	rm -f "$root/tmp/nvmetd-rbd.deb"
	for p in librbd1 librados2; do
		if st=$(in_root dpkg-query -W -f='${Status} ${Version}' "$p" 2>&1) && [[ $st == "install ok installed "* ]]; then ok "$p from the archive: ${st##* }"; else bad "$p: $st"; fi
	done
	if l=$(in_root ldd /usr/sbin/nvmetd-rbd 2>&1) && [[ $l == *librbd.so.1*"=> /"* && $l == *librados.so.2*"=> /"* && $l != *"not found"* ]]; then
		ok "ldd /usr/sbin/nvmetd-rbd resolves ($(grep -c '=> /' <<<"$l") libraries)"
	else
		bad "ldd /usr/sbin/nvmetd-rbd:"$'\n'"$l"
	fi
	sv=$(in_root nvmetd --version 2>&1) || true
	if v=$(in_root nvmetd-rbd --version 2>&1) && [ "$v" = "$sv" ]; then ok "nvmetd-rbd --version: $v"; else bad "nvmetd-rbd --version: $v (nvmetd: $sv)"; fi
	ex=/usr/share/doc/nvmetd-rbd/examples/nvmetd-gateway.yaml
	if out=$(in_root nvmetd-rbd --check-config --config $ex 2>&1 >/dev/null) && [[ $out == *"the configuration is valid"* ]]; then
		ok "nvmetd-rbd --check-config on $ex"
	else
		bad "nvmetd-rbd --check-config on $ex: $out"
	fi
	# The gateway section is checked, not passed over.
	sed 's/^  lease: .*/  lease: 10s\n  bogus_setting: 1/' "$root$ex" >"$root/tmp/bad-gateway.yaml"
	if out=$(in_root nvmetd-rbd --check-config --config /tmp/bad-gateway.yaml 2>&1 >/dev/null); then
		bad "nvmetd-rbd --check-config accepted an unknown gateway key"
	elif [[ $out == *gateway.bogus_setting* ]]; then
		ok "nvmetd-rbd --check-config refuses a broken gateway section"
	else
		bad "nvmetd-rbd --check-config on a broken gateway section: $out"
	fi
	# The static nvmetd refuses to start with a gateway section: EX_CONFIG,
	# naming what to install. (Loopback, an ephemeral port, a memory
	# namespace: what it starts before refusing is released.)
	cat >"$root/tmp/gw.yaml" <<'YAML'
daemon: {control_socket: /tmp/gw-ctl.sock, data_dir: /tmp/gw-data}
gateway: {name: a, cluster: {pool: rbd}, ana_groups: [{id: 1, preferred: a}]}
subsystems:
  - nqn: nqn.2024-01.com.example:gw
    allow_any_host: true
    namespaces: [{nsid: 1, backend: {kind: memory, size: 1MiB}}]
ports:
  - {id: 1, address: 127.0.0.1, service_id: 0, subsystems: [nqn.2024-01.com.example:gw]}
YAML
	rc=0
	out=$(timeout 120 chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin nvmetd --config /tmp/gw.yaml --log-format console 2>&1) || rc=$?
	if [ "$rc" = 78 ] && [[ $out == *"needs the Ceph client libraries"* ]]; then
		ok "static nvmetd refuses a gateway section: exit 78 (EX_CONFIG)"
	else
		bad "static nvmetd with a gateway section: exit $rc, want 78:"$'\n'"$out"
	fi
	rm -rf "$root/tmp/gw.yaml" "$root/tmp/gw-data" "$root/tmp/gw-ctl.sock" "$root/tmp/bad-gateway.yaml"
	u=$root/lib/systemd/system/nvmetd-rbd.service
	if grep -q '^ExecStart=/usr/sbin/nvmetd-rbd --config /etc/nvmetd/nvmetd.yaml$' "$u" && grep -q '^ExecReload=/usr/sbin/nvmetd-rbd reload --config /etc/nvmetd/nvmetd.yaml$' "$u" &&
		grep -q '^Conflicts=nvmetd.service$' "$u"; then
		ok "nvmetd-rbd.service runs /usr/sbin/nvmetd-rbd on /etc/nvmetd/nvmetd.yaml, conflicts with nvmetd.service"
	else
		bad "nvmetd-rbd.service: $(grep -E '^(ExecStart|Conflicts)=' "$u" 2>&1)"
	fi
	if cmp -s <(grep -v '^#' "$u" | grep -vE '^(ExecStart|ExecReload|Description|Documentation|Conflicts)=') \
		<(grep -v '^#' "$root/lib/systemd/system/nvmetd.service" | grep -vE '^(ExecStart|ExecReload|Description|Documentation)='); then
		ok "nvmetd-rbd.service has nvmetd.service's settings otherwise"
	else
		bad "nvmetd-rbd.service differs from nvmetd.service beyond ExecStart, ExecReload, Description, Documentation, Conflicts"
	fi
	for f in /usr/share/man/man8/nvmetd-rbd.8.gz /usr/share/doc/nvmetd-rbd/copyright /usr/share/doc/nvmetd-rbd/README.Debian; do
		if [ -s "$root$f" ]; then ok "installed $f"; else bad "missing $f"; fi
	done
fi

# The conffile survives remove, and an edit survives it too.
echo "# edited by the admin" >>"$root/etc/nvmetd/nvmetd.yaml"
if [ -n "$rdeb" ]; then
	if in_root dpkg -r nvmetd-rbd >/tmp/nvmetd-deb-rbd-remove.log 2>&1; then ok "dpkg -r nvmetd-rbd"; else bad "dpkg -r nvmetd-rbd: $(tail -5 /tmp/nvmetd-deb-rbd-remove.log)"; fi
	for f in /usr/sbin/nvmetd-rbd /lib/systemd/system/nvmetd-rbd.service /usr/share/man/man8/nvmetd-rbd.8.gz; do
		if [ -e "$root$f" ] || [ -L "$root$f" ]; then bad "$f left after remove"; fi
	done
fi
if in_root dpkg -r nvmetd >/tmp/nvmetd-deb-remove.log 2>&1; then ok "dpkg -r"; else bad "dpkg -r: $(tail -5 /tmp/nvmetd-deb-remove.log)"; fi
for f in /usr/sbin/nvmetd /usr/sbin/nvmetctl /usr/bin/nvmeof /usr/bin/iwping /lib/systemd/system/nvmetd.service \
	/lib/systemd/system/nvmeof-autoconnect.service /usr/share/nvmetd /usr/share/doc/nvmetd/examples; do
	if [ -e "$root$f" ]; then bad "$f left after remove"; fi
done
if grep -q 'edited by the admin' "$root/etc/nvmetd/nvmetd.yaml" 2>/dev/null; then ok "remove keeps the edited conffile"; else bad "remove lost the conffile"; fi
# Data a started nvmetd leaves, and an admin's key beside the configuration.
mkdir -p -m 0700 "$root/var/lib/nvmetd"
echo "the namespace's data" >"$root/var/lib/nvmetd/default-ns1.img"
echo "DHHC-1:00:key:" >"$root/var/lib/nvmetd/default-host.key"
echo "DHHC-1:01:admin's key:" >"$root/etc/nvmetd/host1.key"
if in_root dpkg -P nvmetd >/tmp/nvmetd-deb-purge.log 2>&1; then ok "dpkg -P"; else bad "dpkg -P: $(tail -5 /tmp/nvmetd-deb-purge.log)"; fi
if [ -e "$root/etc/nvmetd/nvmetd.yaml" ]; then bad "purge left the conffile"; else ok "purge removes the conffile"; fi
if grep -q "namespace's data" "$root/var/lib/nvmetd/default-ns1.img" 2>/dev/null && [ -s "$root/var/lib/nvmetd/default-host.key" ] &&
	[ -s "$root/etc/nvmetd/host1.key" ]; then
	ok "purge keeps /var/lib/nvmetd (image, key) and the admin's key in /etc/nvmetd"
else
	bad "purge deleted data: $(ls -la "$root/var/lib/nvmetd" "$root/etc/nvmetd" 2>&1)"
fi
if grep -q 'purge keeps the data: /var/lib/nvmetd' /tmp/nvmetd-deb-purge.log; then ok "purge says what it kept"; else bad "purge does not say it kept the data: $(cat /tmp/nvmetd-deb-purge.log)"; fi
# The admin removes the kept data by hand.
rm -rf "$root/var/lib/nvmetd" "$root/etc/nvmetd"
if [ -n "$rdeb" ]; then
	if in_root dpkg -P nvmetd-rbd >/tmp/nvmetd-deb-rbd-purge.log 2>&1 &&
		in_root apt-get autoremove --purge -y -q >>/tmp/nvmetd-deb-rbd-purge.log 2>&1; then
		ok "dpkg -P nvmetd-rbd, apt-get autoremove --purge ($(grep -c '^Removing' /tmp/nvmetd-deb-rbd-purge.log) libraries removed)"
	else
		bad "purge nvmetd-rbd: $(tail -5 /tmp/nvmetd-deb-rbd-purge.log)"
	fi
	if st=$(in_root dpkg-query -W -f='${Status}' librbd1 2>/dev/null) && [[ $st == *" installed" ]]; then bad "librbd1 still installed"; fi
fi
listing >"$root/../after.$$"
if d=$(diff "$before" "$root/../after.$$" | grep -v '^[0-9]' | grep -v 'var/lib/dpkg'); then
	bad "left behind after purge:"$'\n'"$d"
else
	ok "purge leaves the root as before the install"
fi
rm -f "$before" "$root/../after.$$"
echo "deb-test: $pass passed, $fail failed"
[ "$fail" = 0 ]
