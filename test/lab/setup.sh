#!/bin/bash
# nvmetd interop lab: host packages, guest kernel, siw.ko and the guest initramfs.
#
# Idempotent and fast on re-run (each step is skipped when its output is up to
# date; a warm run takes about a second). Safe to run concurrently: a second
# setup.sh waits for the first (flock on $CACHE/.setup.lock).
#
#   1. apt: installs the host packages the lab needs (qemu, busybox-static, the
#      tools copied into the guest, gcc/make and the kernel headers and source).
#   2. fetches the stock Debian kernel image .deb (apt-get download, checked
#      against apt's SHA256) and extracts it; it is never installed on the host.
#   3. builds siw.ko (soft-iWARP) for that exact kernel out of tree from Debian's
#      linux-source package (Debian's 6.1 kernels ship with CONFIG_RDMA_SIW unset).
#   4. packs a busybox initramfs with the RDMA / NVMe-oF modules, the tools and
#      their shared libraries, and the guest scripts from guest/.
#
# Outputs in $NVMETD_LAB_CACHE (default /var/cache/nvmetd-lab):
#   vmlinuz, initrd.img, kver, deb/, kroot-<kver>/, siw/<kver>/siw.ko, run/ (vm.sh)
#
# Env:
#   NVMETD_LAB_CACHE        cache dir (default /var/cache/nvmetd-lab)
#   NVMETD_LAB_KPKG         kernel package, e.g. linux-image-6.1.0-56-amd64
#                           (default: what linux-image-amd64 depends on)
#   NVMETD_LAB_NOAPT=1      never call apt-get install/update (offline re-pack)
#   NVMETD_LAB_REUSE_DEBS   a directory whose kernel .debs may be reused to save the
#                           download, if their SHA256 matches apt's
#                           (default /var/cache/nvmeof-lab/deb; empty to disable)
#   NVMETD_LAB_TSHARK=1     also install tshark on the host (not needed by the tests)
#   NVMETD_LAB_FORCE=1      rebuild siw.ko and the initramfs even if up to date
set -euo pipefail

LAB_DIR=$(cd "$(dirname "$0")" && pwd)
CACHE=${NVMETD_LAB_CACHE:-/var/cache/nvmetd-lab}
REUSE_DEBS=${NVMETD_LAB_REUSE_DEBS-/var/cache/nvmeof-lab/deb}
NOAPT=${NVMETD_LAB_NOAPT:-0}
FORCE=${NVMETD_LAB_FORCE:-0}
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
T0=${EPOCHREALTIME/./}

log() { local d=$(( (${EPOCHREALTIME/./} - T0) / 100000 )); printf '[setup %3d.%ds] %s\n' $((d/10)) $((d%10)) "$*" >&2; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (apt-get, depmod into the cache, qemu share dirs)"
mkdir -p "$CACHE/deb" "$CACHE/siw" "$CACHE/run"

exec 9>"$CACHE/.setup.lock"
if ! flock -n 9; then
  log "another setup.sh holds $CACHE/.setup.lock; waiting"
  flock -w 3600 9 || die "timed out waiting for $CACHE/.setup.lock"
fi

APT_OPTS=(-y -q -o DPkg::Lock::Timeout=900 -o APT::Install-Recommends=false)
apt_install() {  # packages (name or name=version)...
  [ "$NOAPT" != 1 ] || die "NVMETD_LAB_NOAPT=1 but these are missing: $*"
  log "apt-get install $*"
  if ! apt-get install "${APT_OPTS[@]}" "$@" >"$CACHE/apt.log" 2>&1; then
    log "apt-get install failed; apt-get update and retry"
    apt-get update -q -o DPkg::Lock::Timeout=900 >>"$CACHE/apt.log" 2>&1 || true
    apt-get install "${APT_OPTS[@]}" "$@" >>"$CACHE/apt.log" 2>&1 ||
      { tail -n 20 "$CACHE/apt.log" >&2; die "apt-get install $* failed (log: $CACHE/apt.log)"; }
  fi
}
not_installed() {  # prints the arguments that are not installed
  local p
  for p in "$@"; do
    [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" = "ii " ] || echo "$p"
  done
}

# ------------------------------------------------------------ 1. host packages
# Binaries of these are copied into the guest; the rest build siw.ko or run the VM.
HOST_PKGS=(qemu-system-x86 busybox-static nvme-cli fio rdma-core ibverbs-utils ibverbs-providers
  rdmacm-utils iproute2 tcpdump e2fsprogs util-linux mount socat kmod cpio gzip zstd xz-utils
  make gcc-12 libc6-dev)
[ "${NVMETD_LAB_TSHARK:-0}" = 1 ] && HOST_PKGS+=(tshark)
mapfile -t MISSING < <(not_installed "${HOST_PKGS[@]}")
if [ ${#MISSING[@]} -gt 0 ]; then
  [ "$NOAPT" = 1 ] || { log "apt-get update"; apt-get update -q -o DPkg::Lock::Timeout=900 >"$CACHE/apt.log" 2>&1 || true; }
  apt_install "${MISSING[@]}"
fi
log "host packages ok"

# ------------------------------------------------------------ 2. guest kernel
# Resolving the kernel costs a few apt-cache runs (~0.7 s each); the answer is
# cached until the apt lists change.
APTKEY="${NVMETD_LAB_KPKG:-} $( { stat -c %Y /var/lib/apt/lists /var/lib/apt/lists/*Packages* 2>/dev/null || true; } | md5sum | cut -c1-16)"
if [ -f "$CACHE/kernel.resolved" ] && [ "$(head -n1 "$CACHE/kernel.resolved")" = "$APTKEY" ]; then
  read -r KPKG KVER KSHA < <(sed -n 2p "$CACHE/kernel.resolved")
else
  resolve_kpkg() { apt-cache show --no-all-versions linux-image-amd64 2>/dev/null |
    awk '/^Depends:/{for(i=2;i<=NF;i++) if($i ~ /^linux-image-[0-9]/){sub(/,$/,"",$i); print $i; exit}}'; }
  KPKG=${NVMETD_LAB_KPKG:-}
  if [ -z "$KPKG" ]; then
    KPKG=$(resolve_kpkg)
    if [ -z "$KPKG" ] && [ "$NOAPT" != 1 ]; then
      log "apt-get update (linux-image-amd64 unknown)"
      apt-get update -q -o DPkg::Lock::Timeout=900 >"$CACHE/apt.log" 2>&1 || true
      KPKG=$(resolve_kpkg)
    fi
    [ -n "$KPKG" ] || die "cannot resolve the kernel package behind linux-image-amd64 (apt lists?)"
  fi
  read -r KVER KSHA < <(apt-cache show --no-all-versions "$KPKG" 2>/dev/null |
    awk '/^Version:/{v=$2} /^SHA256:/{h=$2} END{print v, h}')
  [ -n "$KVER" ] || die "apt knows no version of $KPKG"
  printf '%s\n%s %s %s\n' "$APTKEY" "$KPKG" "$KVER" "$KSHA" > "$CACHE/kernel.resolved"
fi
KV=${KPKG#linux-image-}; KV=${KV%-unsigned}
DEBNAME="${KPKG}_${KVER//:/%3a}_amd64.deb"
KDEB="$CACHE/deb/$DEBNAME"
deb_ok() { [ -f "$1" ] && { [ -z "$KSHA" ] || [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$KSHA" ]; }; }
if [ ! -f "$KDEB" ]; then
  if [ -n "$REUSE_DEBS" ] && deb_ok "$REUSE_DEBS/$DEBNAME"; then
    log "reusing $REUSE_DEBS/$DEBNAME (SHA256 matches apt)"
    cp "$REUSE_DEBS/$DEBNAME" "$KDEB.tmp" && mv "$KDEB.tmp" "$KDEB"
  else
    log "apt-get download $KPKG=$KVER"
    rm -rf "$CACHE/deb/tmp"; mkdir -p "$CACHE/deb/tmp"
    (cd "$CACHE/deb/tmp" && apt-get download -q "$KPKG=$KVER" 2>&1 | grep -v -i 'unsandboxed' >&2) || true
    deb_ok "$CACHE/deb/tmp/$DEBNAME" || die "download of $KPKG=$KVER failed or SHA256 mismatch"
    mv "$CACHE/deb/tmp/$DEBNAME" "$KDEB"; rm -rf "$CACHE/deb/tmp"
  fi
fi
KROOT="$CACHE/kroot-$KV"
if [ ! -f "$KROOT/.complete" ] || [ "$(cat "$KROOT/.complete")" != "$KVER" ]; then
  log "extracting $DEBNAME"
  rm -rf "$KROOT" "$KROOT.tmp"; mkdir -p "$KROOT.tmp"
  dpkg-deb -x "$KDEB" "$KROOT.tmp"
  echo "$KVER" > "$KROOT.tmp/.complete"
  mv "$KROOT.tmp" "$KROOT"
fi
KMODS="$KROOT/lib/modules/$KV"
[ -f "$KROOT/boot/vmlinuz-$KV" ] || die "$KROOT/boot/vmlinuz-$KV missing"
log "guest kernel $KPKG $KVER"

# ------------------------------------------------------------ 3. siw.ko
SIWDIR="$CACHE/siw/$KV"
SIW_KO=""
if grep -q '^CONFIG_RDMA_SIW=[my]' "$KROOT/boot/config-$KV"; then
  log "the kernel ships siw itself"
else
  SIW_KO="$SIWDIR/siw.ko"
  KSER=$(cut -d. -f1,2 <<<"$KV")          # 6.1
  SRCPKG=linux-source-$KSER HDRPKG=linux-headers-$KV
  mapfile -t MISSING < <(not_installed "$SRCPKG" "$HDRPKG")
  if [ ${#MISSING[@]} -gt 0 ]; then
    pins=(); for p in "${MISSING[@]}"; do pins+=("$p=$KVER"); done
    apt_install "${pins[@]}"
  fi
  SRCVER=$(dpkg-query -W -f='${Version}' "$SRCPKG")
  WANT="$SRCPKG $SRCVER $HDRPKG $(dpkg-query -W -f='${Version}' "$HDRPKG")"
  if [ "$FORCE" = 1 ] || [ ! -f "$SIW_KO" ] || [ "$(cat "$SIWDIR/SOURCE" 2>/dev/null)" != "$WANT" ]; then
    [ "$SRCVER" = "$KVER" ] || log "WARNING: $SRCPKG is $SRCVER, the kernel is $KVER"
    log "building siw.ko from $SRCPKG $SRCVER against $HDRPKG"
    B="$SIWDIR/build"
    rm -rf "$B"; mkdir -p "$B"
    # --occurrence stops reading the 140 MB archive once the directory is out (~3 s, not ~9 s)
    # (--occurrence misbehaves together with --strip-components, hence the mv).
    xz -dc "/usr/src/$SRCPKG.tar.xz" | tar -x -C "$B" --occurrence=1 \
        -f - "$SRCPKG/drivers/infiniband/sw/siw" 2>/dev/null || true
    mv "$B/$SRCPKG/drivers/infiniband/sw/siw"/* "$B/" 2>/dev/null || true
    rm -rf "${B:?}/$SRCPKG"
    [ -f "$B/siw_main.c" ] && [ -f "$B/Makefile" ] || die "siw sources not found in /usr/src/$SRCPKG.tar.xz"
    make -s -C "/usr/src/linux-headers-$KV" M="$B" CONFIG_RDMA_SIW=m -j"$(nproc)" modules >"$SIWDIR/build.log" 2>&1 ||
      { tail -n 30 "$SIWDIR/build.log" >&2; die "siw.ko build failed (log: $SIWDIR/build.log)"; }
    strip --strip-debug -o "$SIW_KO.tmp" "$B/siw.ko"
    mv "$SIW_KO.tmp" "$SIW_KO"
    echo "$WANT" > "$SIWDIR/SOURCE"
    rm -rf "$B"
  fi
  # Make siw part of the extracted module tree so modprobe can resolve it.
  if ! cmp -s "$SIW_KO" "$KMODS/updates/siw.ko"; then
    mkdir -p "$KMODS/updates"
    cp "$SIW_KO" "$KMODS/updates/siw.ko"
    rm -f "$KROOT/.depmod"
  fi
  log "siw.ko ok ($(cat "$SIWDIR/SOURCE"))"
fi
if [ ! -f "$KROOT/.depmod" ]; then
  depmod -b "$KROOT" "$KV"
  touch "$KROOT/.depmod"
fi

# ------------------------------------------------------------ 4. initramfs
# Modules wanted in the guest; their dependencies are added by modprobe --show-depends.
MODS=(virtio_pci virtio_net virtio_console virtio_rng 9pnet_virtio 9p configfs
  ib_core ib_uverbs rdma_ucm rdma_cm iw_cm siw rdma_rxe
  nvme-core nvme-fabrics nvme-rdma nvme-tcp nvmet nvmet-rdma nvmet-tcp
  null_blk loop ext4 crc32c_generic crc32c-intel libcrc32c sch_netem)
# Binaries copied with their shared libraries (busybox provides the rest:
# sha256sum, md5sum, nc, dd, truncate, timeout, hexdump, xxd, ...).
BINS=(/usr/sbin/nvme /usr/bin/fio /usr/bin/rdma /usr/bin/ip /usr/sbin/tc /usr/bin/ss /usr/bin/kmod
  /usr/bin/tcpdump /usr/bin/ibv_devices /usr/bin/ibv_devinfo /usr/bin/rping /usr/bin/ucmatose
  /usr/bin/rdma_server /usr/bin/rdma_client /usr/bin/socat /usr/sbin/losetup
  /usr/sbin/mke2fs /usr/sbin/e2fsck /usr/sbin/fstrim /usr/sbin/blkdiscard)

STAMP=$( {
  echo "kernel $KPKG $KVER"
  [ -z "$SIW_KO" ] || sha256sum < "$SIW_KO"
  printf '%s\n' "${MODS[@]}" "${BINS[@]}"
  dpkg-query -W -f='${Package}=${Version}\n' "${HOST_PKGS[@]}" 2>/dev/null
  cat "$0" "$LAB_DIR"/guest/*
} | sha256sum | cut -d' ' -f1)
if [ "$FORCE" != 1 ] && [ -f "$CACHE/initrd.img" ] && [ -f "$CACHE/vmlinuz" ] &&
   [ "$(cat "$CACHE/initrd.stamp" 2>/dev/null)" = "$STAMP" ]; then
  log "initramfs up to date: $CACHE/initrd.img"
  log "done: $CACHE/vmlinuz ($KV), $CACHE/initrd.img"
  exit 0
fi

log "building the initramfs"
R="$CACHE/initramfs-root"
rm -rf "$R"; mkdir -p "$R"
for d in usr/bin usr/sbin usr/lib/x86_64-linux-gnu usr/lib64 etc proc sys dev run tmp root host mnt var/tmp lab; do
  mkdir -p "$R/$d"
done
ln -s usr/bin "$R/bin"; ln -s usr/sbin "$R/sbin"; ln -s usr/lib "$R/lib"; ln -s usr/lib64 "$R/lib64"
ln -s /run "$R/var/run"

canon() { case $1 in /lib/*|/lib64/*|/bin/*|/sbin/*) echo "/usr$1" ;; *) echo "$1" ;; esac; }
copy_file() {  # copy a host file to the same (usr-merged) path in $R; symlinks stay symlinks
  local f=$1 real dst rdst
  real=$(readlink -f "$f"); dst=$(canon "$f"); rdst=$(canon "$real")
  mkdir -p "$R$(dirname "$rdst")"
  [ -e "$R$rdst" ] || cp "$real" "$R$rdst"
  if [ "$dst" != "$rdst" ] && [ ! -e "$R$dst" ] && [ ! -L "$R$dst" ]; then
    mkdir -p "$R$(dirname "$dst")"; ln -s "$rdst" "$R$dst"
  fi
}
declare -A SEEN=()
copy_with_libs() {
  local f lib
  for f in "$@"; do
    [ -e "$f" ] || die "$f not found on the host (package missing?)"
    copy_file "$f"
    for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*' | sort -u); do
      [ -n "${SEEN[$lib]:-}" ] && continue
      SEEN[$lib]=1; copy_file "$lib"
    done
  done
}
copy_with_libs "${BINS[@]}"
ln -sf mke2fs "$R/usr/sbin/mkfs.ext4"; ln -sf e2fsck "$R/usr/sbin/fsck.ext4"
cp /etc/mke2fs.conf "$R/etc/" 2>/dev/null || true
# libibverbs user-space providers (dlopen'ed by libibverbs): siw and rxe
mkdir -p "$R/etc/libibverbs.d"
for p in siw rxe; do
  copy_with_libs /usr/lib/x86_64-linux-gnu/libibverbs/lib$p-rdmav*.so
  cp "/etc/libibverbs.d/$p.driver" "$R/etc/libibverbs.d/"
done
for l in modprobe insmod rmmod lsmod depmod modinfo; do ln -sf ../bin/kmod "$R/usr/sbin/$l"; done
cp /bin/busybox "$R/usr/bin/busybox"
for a in $(/bin/busybox --list); do
  [ -e "$R/usr/bin/$a" ] || [ -e "$R/usr/sbin/$a" ] || ln -s busybox "$R/usr/bin/$a"
done

for m in "${MODS[@]}"; do
  modprobe -d "$KROOT" -S "$KV" --show-depends "$m" 2>/dev/null | awk '$1=="insmod"{print $2}' | grep . ||
    die "module $m not found for $KV"
done | sort -u | while read -r ko; do
  rel=${ko#"$KROOT"/}
  mkdir -p "$R/usr/$(dirname "$rel")"
  cp "$ko" "$R/usr/$rel"
done
cp "$KMODS"/modules.{order,builtin,builtin.modinfo} "$R/usr/lib/modules/$KV/" 2>/dev/null || true
depmod -b "$R" "$KV"

# /etc
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$R/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$R/etc/group"
echo nvmetd-lab > "$R/etc/hostname"
echo "nameserver 10.0.2.3" > "$R/etc/resolv.conf"
printf '127.0.0.1 localhost\n10.0.2.15 nvmetd-lab\n10.0.2.2 host\n' > "$R/etc/hosts"
cp /etc/protocols /etc/services "$R/etc/" 2>/dev/null || true
mkdir -p "$R/etc/nvme"
# A fixed host identity, so that captures and allowed-host lists are reproducible.
echo "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-000000000001" > "$R/etc/nvme/hostnqn"
echo "6e766d65-7464-4c61-9b00-000000000001" > "$R/etc/nvme/hostid"
echo "$KV" > "$R/etc/lab-kver"
echo 'export PATH=/lab:/usr/sbin:/usr/bin:/host/bin HOME=/root PS1="nvmetd-lab:\w# "' > "$R/etc/profile"
install -m 0755 "$LAB_DIR/guest/init" "$R/init"
for f in "$LAB_DIR"/guest/*; do
  [ "$(basename "$f")" = init ] || install -m 0755 "$f" "$R/lab/"
done

log "packing initramfs"
(cd "$R" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet | zstd -q -T0 -3) > "$CACHE/initrd.img.tmp"
cp "$KROOT/boot/vmlinuz-$KV" "$CACHE/vmlinuz.tmp"
mv "$CACHE/vmlinuz.tmp" "$CACHE/vmlinuz"
mv "$CACHE/initrd.img.tmp" "$CACHE/initrd.img"
echo "$KV" > "$CACHE/kver"
echo "$STAMP" > "$CACHE/initrd.stamp"
rm -rf "$R"
log "done: $CACHE/vmlinuz ($KV), $CACHE/initrd.img ($(du -h "$CACHE/initrd.img" | cut -f1))"
