#!/bin/bash
# nvmetd interop lab: host packages, guest kernels, siw.ko and the guest initramfs.
#
#   setup.sh [SERIES...]     SERIES: 6.1, 6.12 (default: $NVMETD_LAB_KERNEL, else both)
#
# Idempotent and fast on re-run (each step is skipped when its output is up to
# date; a warm run takes well under a second per kernel). Safe to run
# concurrently: a second setup.sh waits for the first (flock on
# $CACHE/.setup.lock).
#
#   1. apt: installs the host packages the lab needs (qemu, busybox-static, the
#      tools copied into the guest, gcc/make for the siw build).
#   2. per kernel series: fetches the stock Debian kernel image .deb (apt-get
#      download, checked against apt's SHA256) and extracts it; it is never
#      installed on the host.
#        6.1   what linux-image-amd64 points to (linux-image-6.1.0-N-amd64, signed)
#        6.12  the newest linux-image-6.12.*+deb12-amd64-unsigned (through the
#              linux-image-6.12-amd64 meta package)
#   3. builds siw.ko (soft-iWARP) for that exact kernel out of tree from Debian's
#      linux-source-<series> (Debian's 6.1 and 6.12 kernels both ship with
#      CONFIG_RDMA_SIW unset), against the kernel's headers. Headers, kbuild and
#      source are used from the host if installed at the kernel's exact version,
#      else their .debs are fetched and unpacked into the cache (installing
#      linux-headers-6.12 would pull the 6.12 image onto the host).
#   4. packs a busybox initramfs with the RDMA / NVMe-oF modules (decompressed:
#      6.12 ships .ko.xz, which bookworm's kmod hands to the kernel as is first),
#      the tools and their shared libraries, and the guest scripts from guest/.
#
# Outputs in $NVMETD_LAB_CACHE (default /var/cache/nvmetd-lab):
#   linux-<series>/{vmlinuz,initrd.img,kver,kpkg}  what vm.sh boots (one directory a series)
#   deb/, kroot-<kver>/, kdev-<kver>/, siw/<kver>/siw.ko, run/ (vm.sh instances)
#
# Env:
#   NVMETD_LAB_CACHE        cache dir (default /var/cache/nvmetd-lab)
#   NVMETD_LAB_KERNEL       series to build, comma or space separated (default: 6.1 and 6.12)
#   NVMETD_LAB_KPKG         pin a kernel package, e.g. linux-image-6.1.0-56-amd64 or
#                           linux-image-6.12.117+deb12-amd64-unsigned; it replaces
#                           the default of its own series only
#   NVMETD_LAB_NOAPT=1      never call apt-get install/update/download (offline re-pack)
#   NVMETD_LAB_REUSE_DEBS   a directory whose kernel .debs may be reused to save the
#                           download, if their SHA256 matches apt's
#                           (default /var/cache/nvmeof-lab/deb; empty to disable)
#   NVMETD_LAB_TSHARK=1     also install tshark on the host (not needed by the tests)
#   NVMETD_LAB_FORCE=1      rebuild siw.ko and the initramfs even if up to date
set -euo pipefail
shopt -s inherit_errexit

LAB_DIR=$(cd "$(dirname "$0")" && pwd)
CACHE=${NVMETD_LAB_CACHE:-/var/cache/nvmetd-lab}
REUSE_DEBS=${NVMETD_LAB_REUSE_DEBS-/var/cache/nvmeof-lab/deb}
NOAPT=${NVMETD_LAB_NOAPT:-0}
FORCE=${NVMETD_LAB_FORCE:-0}
ALL_SERIES=(6.1 6.12)
export DEBIAN_FRONTEND=noninteractive LC_ALL=C
T0=${EPOCHREALTIME/./}
CUR=""  # the series being built, for log lines

log() { local d=$(( (${EPOCHREALTIME/./} - T0) / 100000 )); printf '[setup %3d.%ds]%s %s\n' $((d/10)) $((d%10)) "${CUR:+ $CUR:}" "$*" >&2; }
die() { printf '[setup]%s ERROR: %s\n' "${CUR:+ $CUR:}" "$*" >&2; exit 1; }

# series_of PKG: the kernel series of an image package (linux-image-6.12.117+deb12-amd64-unsigned -> 6.12)
series_of() { sed -E 's/^linux-image-([0-9]+\.[0-9]+)[.-].*/\1/' <<<"$1"; }

if [ $# -gt 0 ]; then SERIES="$*"
elif [ -n "${NVMETD_LAB_KERNEL:-}" ]; then SERIES=$NVMETD_LAB_KERNEL
elif [ -n "${NVMETD_LAB_KPKG:-}" ]; then SERIES=$(series_of "$NVMETD_LAB_KPKG")  # a pin alone selects its series
else SERIES="${ALL_SERIES[*]}"; fi
read -r -a SERIES <<<"${SERIES//,/ }"
for s in "${SERIES[@]}"; do
  [[ $s =~ ^[0-9]+\.[0-9]+$ ]] || die "bad kernel series '$s' (known: ${ALL_SERIES[*]})"
done

[ "$(id -u)" = 0 ] || die "must run as root (apt-get, depmod into the cache, qemu share dirs)"
mkdir -p "$CACHE/deb" "$CACHE/siw" "$CACHE/run"

exec 9>"$CACHE/.setup.lock"
if ! flock -n 9; then
  log "another setup.sh holds $CACHE/.setup.lock; waiting"
  flock -w 3600 9 || die "timed out waiting for $CACHE/.setup.lock"
fi

APT_OPTS=(-y -q -o DPkg::Lock::Timeout=900 -o APT::Install-Recommends=false)
apt_update() { [ "$NOAPT" = 1 ] || apt-get update -q -o DPkg::Lock::Timeout=900 >>"$CACHE/apt.log" 2>&1 || true; }
apt_install() {  # packages (name or name=version)...
  [ "$NOAPT" != 1 ] || die "NVMETD_LAB_NOAPT=1 but these are missing: $*"
  log "apt-get install $*"
  if ! apt-get install "${APT_OPTS[@]}" "$@" >"$CACHE/apt.log" 2>&1; then
    log "apt-get install failed; apt-get update and retry"
    apt_update
    apt-get install "${APT_OPTS[@]}" "$@" >>"$CACHE/apt.log" 2>&1 ||
      { tail -n 20 "$CACHE/apt.log" >&2; die "apt-get install $* failed (log: $CACHE/apt.log)"; }
  fi
}
not_installed() {  # prints the arguments that are not installed (one dpkg-query for all)
  local ok
  ok=$(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "$@" 2>/dev/null | awk '$1=="ii" {print $2}' || true)
  printf '%s\n' "$@" | grep -vxF -f <(echo "$ok") || true
}
installed_at() {  # PKG VERSION: installed at exactly that version?
  [ "$(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' "$1" 2>/dev/null)" = "ii  $2" ]
}
apt_field() {  # PKG[=VERSION] FIELD: the field of apt's record
  apt-cache show --no-all-versions "$1" 2>/dev/null | awk -v f="$2:" '$1==f {print $2; exit}'
}
sha_ok() {  # FILE SHA256 (empty: not checked)
  [ -f "$1" ] && { [ -z "$2" ] || [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }
}
# fetch_deb PKG VERSION: prints the path of PKG_VERSION_ARCH.deb in $CACHE/deb,
# downloading it (apt-get download) unless it is there. A download is checked
# against apt's SHA256 before it is moved into place, so a .deb that is there
# has been checked.
fetch_deb() {
  local p=$1 v=$2 sha arch f
  for f in "$CACHE/deb/${p}_${v//:/%3a}"_*.deb; do
    [ -f "$f" ] && { echo "$f"; return; }
  done
  read -r arch sha < <(apt-cache show --no-all-versions "$p=$v" 2>/dev/null |
    awk '$1=="Architecture:" {a=$2} $1=="SHA256:" {h=$2} END {print a, h}')
  [ -n "$arch" ] || die "apt knows no $p=$v (apt lists out of date? apt-get update)"
  f="$CACHE/deb/${p}_${v//:/%3a}_${arch}.deb"
  sha_ok "$f" "$sha" && { echo "$f"; return; }
  if [ -n "$REUSE_DEBS" ] && sha_ok "$REUSE_DEBS/$(basename "$f")" "$sha"; then
    log "reusing $REUSE_DEBS/$(basename "$f") (SHA256 matches apt)"
    cp "$REUSE_DEBS/$(basename "$f")" "$f.tmp" && mv "$f.tmp" "$f"
    echo "$f"; return
  fi
  [ "$NOAPT" != 1 ] || die "$p=$v is not in $CACHE/deb and NVMETD_LAB_NOAPT=1"
  log "apt-get download $p=$v"
  local tmp; tmp=$(mktemp -d "$CACHE/deb/tmp.XXXXXX")
  (cd "$tmp" && apt-get download -q "$p=$v" 2>&1 | grep -v -i -e unsandboxed -e '^Get:' >&2) || true
  sha_ok "$tmp/$(basename "$f")" "$sha" || { rm -rf "$tmp"; die "download of $p=$v failed or SHA256 mismatch"; }
  mv "$tmp/$(basename "$f")" "$f"; rm -rf "$tmp"
  echo "$f"
}

# ------------------------------------------------------------ 1. host packages
# Binaries of these are copied into the guest; the rest build siw.ko or run the VM.
HOST_PKGS=(qemu-system-x86 busybox-static nvme-cli fio rdma-core ibverbs-utils ibverbs-providers
  rdmacm-utils iproute2 tcpdump e2fsprogs util-linux mount socat kmod cpio gzip zstd xz-utils
  make gcc-12 libc6-dev iperf3)
[ "${NVMETD_LAB_TSHARK:-0}" = 1 ] && HOST_PKGS+=(tshark)
mapfile -t MISSING < <(not_installed "${HOST_PKGS[@]}")
if [ ${#MISSING[@]} -gt 0 ]; then
  log "apt-get update"; apt_update
  apt_install "${MISSING[@]}"
fi
log "host packages ok"

# Modules wanted in the guest; their dependencies are added by modprobe --show-depends.
MODS=(virtio_pci virtio_net virtio_console virtio_rng 9pnet_virtio 9p configfs
  ib_core ib_uverbs rdma_ucm rdma_cm iw_cm siw rdma_rxe
  nvme-core nvme-fabrics nvme-rdma nvme-tcp nvmet nvmet-rdma nvmet-tcp
  null_blk loop ext4 crc32c_generic crc32c-intel libcrc32c sch_netem
  veth sch_tbf tcp_bbr) # the WAN lab's (docs/wan.md): the veth pair, the bottleneck, bbr
# Binaries copied with their shared libraries (busybox provides the rest:
# sha256sum, md5sum, nc, dd, truncate, timeout, hexdump, xxd, ...).
BINS=(/usr/sbin/nvme /usr/bin/fio /usr/bin/rdma /usr/bin/ip /usr/sbin/tc /usr/bin/ss /usr/bin/kmod
  /usr/bin/tcpdump /usr/bin/ibv_devices /usr/bin/ibv_devinfo /usr/bin/rping /usr/bin/ucmatose
  /usr/bin/rdma_server /usr/bin/rdma_client /usr/bin/socat /usr/sbin/losetup
  /usr/sbin/mke2fs /usr/sbin/e2fsck /usr/sbin/fstrim /usr/sbin/blkdiscard
  /usr/bin/iperf3) # the WAN lab's path capacity (docs/wan.md)

# ------------------------------------------------------------ 2. guest kernel
# resolve_kernel: sets KPKG KVER KSHA for series $CUR. Resolving costs a few
# apt-cache runs (~0.7 s each); the answer is cached until the apt lists change.
resolve_kernel() {
  local pin="" rf="$KDIR/kernel.resolved" key meta
  if [ -n "${NVMETD_LAB_KPKG:-}" ] && [ "$(series_of "$NVMETD_LAB_KPKG")" = "$CUR" ]; then pin=$NVMETD_LAB_KPKG; fi
  # (the key: the pin, the apt lists' times, and this function's own text)
  key="$pin $( { stat -c %Y /var/lib/apt/lists /var/lib/apt/lists/*Packages* 2>/dev/null || true; declare -f resolve_kernel; } | md5sum | cut -c1-16)"
  if [ -f "$rf" ] && [ "$(head -n1 "$rf")" = "$key" ]; then
    read -r KPKG KVER KSHA < <(sed -n 2p "$rf")
    return
  fi
  KPKG=$pin
  if [ -z "$KPKG" ]; then
    # 6.1 is Debian 12's default kernel; other series have a meta package
    # linux-image-<series>-amd64 (in bookworm-backports or -security).
    if [ "$CUR" = 6.1 ]; then meta=linux-image-amd64; else meta=linux-image-$CUR-amd64; fi
    resolve() { apt-cache show --no-all-versions "$meta" 2>/dev/null |
      awk '/^Depends:/{for(i=2;i<=NF;i++) if($i ~ /^linux-image-[0-9]/){sub(/,$/,"",$i); print $i; exit}}'; }
    KPKG=$(resolve)
    if [ -z "$KPKG" ] && [ "$NOAPT" != 1 ]; then
      log "apt-get update ($meta unknown)"; apt_update
      KPKG=$(resolve)
    fi
    [ -n "$KPKG" ] || die "cannot resolve the kernel package behind $meta (apt lists?)"
    [ "$(series_of "$KPKG")" = "$CUR" ] ||
      die "$meta points to $KPKG, not a $CUR kernel; pin one with NVMETD_LAB_KPKG"
    # Debian has a signed image (linux-image-X) and the unsigned one it is
    # made from (linux-image-X-unsigned). 6.1 stays exactly what
    # linux-image-amd64 depends on (the signed image, as ever); for the other
    # series the lab boots the unsigned twin.
    if [ "$CUR" != 6.1 ] && [ -n "$(apt_field "$KPKG-unsigned" Version)" ]; then KPKG=$KPKG-unsigned; fi
  fi
  read -r KVER KSHA < <(apt-cache show --no-all-versions "$KPKG" 2>/dev/null |
    awk '$1=="Version:" {v=$2} $1=="SHA256:" {h=$2} END {print v, h}')
  [ -n "$KVER" ] || die "apt knows no version of $KPKG"
  printf '%s\n%s %s %s\n' "$key" "$KPKG" "$KVER" "$KSHA" > "$rf.tmp"; mv "$rf.tmp" "$rf"
}

# ------------------------------------------------------------ 3. siw.ko
# headers_dir: prints the kernel's build directory: the installed headers at
# the kernel's exact version, else the headers, -common and kbuild .debs
# unpacked into $CACHE/kdev-$KV.
headers_dir() {
  local hdr=linux-headers-$KV kdev="$CACHE/kdev-$KV" p d deps v
  if installed_at "$hdr" "$KVER" && [ -f "/usr/src/$hdr/Makefile" ]; then echo "/usr/src/$hdr"; return; fi
  if [ "$(cat "$kdev/.complete" 2>/dev/null)" != "$KVER" ]; then
    deps=$(apt-cache depends "$hdr=$KVER" 2>/dev/null | awk '/Depends: linux-(headers-.*-common|kbuild-)/{print $2}' | sort -u)
    [ -n "$deps" ] || die "cannot resolve the dependencies of $hdr=$KVER"
    rm -rf "$kdev" "$kdev.tmp"; mkdir -p "$kdev.tmp"
    for p in "$hdr" $deps; do
      # A dependency is at the kernel's version, or (Debian rebuilds
      # linux-kbuild-* apart from the image: bookworm-security had the
      # 6.1.192-2 image with kbuild 6.1.192-3 only) at apt's candidate when
      # that is not older.
      v=$KVER
      if [ -z "$(apt_field "$p=$KVER" Version)" ]; then
        v=$(apt_field "$p" Version)
        [ -n "$v" ] && dpkg --compare-versions "$v" ge "$KVER" || v=$KVER
      fi
      d=$(fetch_deb "$p" "$v")
      log "unpacking $(basename "$d")"
      dpkg-deb -x "$d" "$kdev.tmp"
    done
    # Debian's per-flavour Makefile includes the -common one by absolute path.
    sed -i "s#^include /usr/src/#include $kdev/usr/src/#" "$kdev.tmp/usr/src/$hdr/Makefile"
    echo "$KVER" > "$kdev.tmp/.complete"
    mv "$kdev.tmp" "$kdev"
  fi
  echo "$kdev/usr/src/$hdr"
}

# siw_sources DIR: extracts drivers/infiniband/sw/siw of linux-source-<series>
# into DIR (from /usr/src if installed at the kernel's version, else from the
# .deb) and prints the source package's version.
siw_sources() {
  local b=$1 src=linux-source-$CUR ver d
  mkdir -p "$b/x"
  # --occurrence stops reading the 150 MB archive once the directory is out
  # (~3 s, not ~9 s), which kills the decompressor with SIGPIPE: ignore that.
  if installed_at "$src" "$KVER" && [ -f "/usr/src/$src.tar.xz" ]; then
    ver=$KVER
    { xz -dc "/usr/src/$src.tar.xz" | tar -x -C "$b/x" --occurrence=1 -f - "$src/drivers/infiniband/sw/siw"; } 2>/dev/null || true
  else
    d=$(fetch_deb "$src" "$KVER")
    ver=$(dpkg-deb -f "$d" Version)
    { dpkg-deb --fsys-tarfile "$d" | tar -xO "./usr/src/$src.tar.xz" | xz -dc |
        tar -x -C "$b/x" --occurrence=1 -f - "$src/drivers/infiniband/sw/siw"; } 2>/dev/null || true
  fi
  # (--occurrence misbehaves together with --strip-components, hence the mv)
  mv "$b/x/$src/drivers/infiniband/sw/siw"/* "$b/" 2>/dev/null || true
  rm -rf "${b:?}/x"
  [ -f "$b/siw_main.c" ] && [ -f "$b/Makefile" ] || die "siw sources not found in $src $KVER"
  echo "$ver"
}

build_siw() {
  local siwdir="$CACHE/siw/$KV" hdr want b srcver
  SIW_KO=""
  if grep -q '^CONFIG_RDMA_SIW=[my]' "$KROOT/boot/config-$KV"; then
    log "the kernel ships siw itself"
    return
  fi
  SIW_KO="$siwdir/siw.ko"
  # What the module is built from (the same words as before per-series
  # caches, so that an older setup.sh sharing the cache does not rebuild it).
  want="linux-source-$CUR $KVER linux-headers-$KV $KVER"
  if [ "$FORCE" = 1 ] || [ ! -f "$SIW_KO" ] || [ "$(cat "$siwdir/SOURCE" 2>/dev/null)" != "$want" ]; then
    hdr=$(headers_dir)
    b="$siwdir/build"
    rm -rf "$b"; mkdir -p "$b"
    srcver=$(siw_sources "$b")
    [ "$srcver" = "$KVER" ] || die "linux-source-$CUR is $srcver, the kernel is $KVER"
    log "building siw.ko from linux-source-$CUR $srcver against $hdr"
    # CONFIG_DEBUG_INFO_BTF_MODULES= : the 6.12 headers ship a vmlinux (the
    # BTF base), so kbuild would run pahole on the module (the 6.1 headers
    # have none). siw needs no BTF, and BTF made by another pahole than
    # Debian's could make the kernel refuse the module.
    nice make -s -C "$hdr" M="$b" CONFIG_RDMA_SIW=m CONFIG_DEBUG_INFO_BTF_MODULES= -j"$(nproc)" modules \
      >"$siwdir/build.log" 2>&1 || { tail -n 30 "$siwdir/build.log" >&2; die "siw.ko build failed (log: $siwdir/build.log)"; }
    [ "$(modinfo -F vermagic "$b/siw.ko" | cut -d' ' -f1)" = "$KV" ] || die "siw.ko has vermagic $(modinfo -F vermagic "$b/siw.ko")"
    strip --strip-debug -o "$SIW_KO.tmp" "$b/siw.ko"
    mv "$SIW_KO.tmp" "$SIW_KO"
    echo "$want" > "$siwdir/SOURCE"
    rm -rf "$b"
  fi
  # Make siw part of the extracted module tree so modprobe can resolve it.
  if ! cmp -s "$SIW_KO" "$KMODS/updates/siw.ko"; then
    mkdir -p "$KMODS/updates"
    cp "$SIW_KO" "$KMODS/updates/siw.ko"
    rm -f "$KROOT/.depmod"
  fi
  log "siw.ko ok ($(cat "$siwdir/SOURCE"))"
}

# ------------------------------------------------------------ 4. initramfs
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

build_initramfs() {
  local stamp out="$KDIR" m ko rel dst
  stamp=$( {
    echo "kernel $KPKG $KVER"
    [ -z "$SIW_KO" ] || sha256sum < "$SIW_KO"
    printf '%s\n' "${MODS[@]}" "${BINS[@]}"
    dpkg-query -W -f='${Package}=${Version}\n' "${HOST_PKGS[@]}" 2>/dev/null
    cat "$0" "$LAB_DIR"/guest/*
  } | sha256sum | cut -d' ' -f1)
  if [ "$FORCE" != 1 ] && [ -f "$out/initrd.img" ] && [ -f "$out/vmlinuz" ] &&
     [ "$(cat "$out/initrd.stamp" 2>/dev/null)" = "$stamp" ]; then
    log "initramfs up to date: $out/initrd.img"
    return
  fi

  log "building the initramfs"
  R="$out/initramfs-root"
  rm -rf "$R"; mkdir -p "$R"
  for d in usr/bin usr/sbin usr/lib/x86_64-linux-gnu usr/lib64 etc proc sys dev run tmp root host mnt var/tmp lab; do
    mkdir -p "$R/$d"
  done
  ln -s usr/bin "$R/bin"; ln -s usr/sbin "$R/sbin"; ln -s usr/lib "$R/lib"; ln -s usr/lib64 "$R/lib64"
  ln -s /run "$R/var/run"

  declare -A SEEN=()
  copy_with_libs "${BINS[@]}"
  # netem's jitter distribution (tc ... delay X Y distribution normal).
  mkdir -p "$R/usr/lib/x86_64-linux-gnu/tc"
  cp /usr/lib/x86_64-linux-gnu/tc/normal.dist "$R/usr/lib/x86_64-linux-gnu/tc/"
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

  # The modules and their dependencies; built-in ones (virtio_pci in 6.12)
  # need nothing.
  for m in "${MODS[@]}"; do
    deps=$(modprobe -d "$KROOT" -S "$KV" --show-depends "$m" 2>/dev/null) || die "module $m not found for $KV"
    awk '$1=="insmod"{print $2}' <<<"$deps"
  done | sort -u | while read -r ko; do
    rel=${ko#"$KROOT"/}
    dst="$R/usr/${rel%.[gx]z}"; dst=${dst%.zst}
    mkdir -p "$(dirname "$dst")"
    case $ko in
      # Stored decompressed: bookworm's kmod 30 first hands a .ko.xz to
      # finit_module() as it is, and the 6.12 kernel logs "Invalid ELF
      # header magic: != ELF" for every module before kmod decompresses it
      # itself. Decompressed, they also load faster under TCG.
      *.ko.xz)  xz -dc "$ko" > "$dst" ;;
      *.ko.zst) zstd -qdc "$ko" > "$dst" ;;
      *.ko.gz)  gzip -dc "$ko" > "$dst" ;;
      *)        cp "$ko" "$dst" ;;
    esac
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
  (cd "$R" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet | zstd -q -T0 -3) > "$out/initrd.img.tmp"
  cp "$KROOT/boot/vmlinuz-$KV" "$out/vmlinuz.tmp"
  mv "$out/vmlinuz.tmp" "$out/vmlinuz"
  mv "$out/initrd.img.tmp" "$out/initrd.img"
  echo "$KV" > "$out/kver"
  echo "$KPKG $KVER" > "$out/kpkg"
  echo "$stamp" > "$out/initrd.stamp"
  rm -rf "$R"
}

# ------------------------------------------------------------ per series
for CUR in "${SERIES[@]}"; do
  KDIR="$CACHE/linux-$CUR"
  mkdir -p "$KDIR"
  resolve_kernel
  KV=${KPKG#linux-image-}; KV=${KV%-unsigned}
  KDEB=$(fetch_deb "$KPKG" "$KVER")
  KROOT="$CACHE/kroot-$KV"
  if [ ! -f "$KROOT/.complete" ] || [ "$(cat "$KROOT/.complete")" != "$KVER" ]; then
    log "extracting $(basename "$KDEB")"
    rm -rf "$KROOT" "$KROOT.tmp"; mkdir -p "$KROOT.tmp"
    dpkg-deb -x "$KDEB" "$KROOT.tmp"
    echo "$KVER" > "$KROOT.tmp/.complete"
    mv "$KROOT.tmp" "$KROOT"
  fi
  KMODS="$KROOT/lib/modules/$KV"
  [ -f "$KROOT/boot/vmlinuz-$KV" ] || die "$KROOT/boot/vmlinuz-$KV missing"
  log "guest kernel $KPKG $KVER"

  build_siw
  if [ ! -f "$KROOT/.depmod" ]; then
    depmod -b "$KROOT" "$KV"
    touch "$KROOT/.depmod"
  fi
  build_initramfs
  log "done: $KDIR/vmlinuz ($KV), $KDIR/initrd.img ($(du -h "$KDIR/initrd.img" | cut -f1))"
done
