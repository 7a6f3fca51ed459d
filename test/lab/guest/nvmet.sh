#!/bin/sh
# Kernel NVMe-oF target (nvmet) helper; runs inside the guest (on PATH as nvmet.sh).
#
#   nvmet.sh setup      create subsystem $NQN (if missing), namespace $NSID on $BACKEND
#                       (if missing), port $PORTID (if missing), and link them
#   nvmet.sh teardown   disconnect all hosts, remove every nvmet port, subsystem and
#                       host entry, and the null_blk devices made by this helper
#   nvmet.sh show       dump the nvmet configfs tree
#
# Env for setup [default]:
#   NQN [nqn.2024-01.io.nvmetd-lab:kernel-target]
#   TRTYPE [rdma] (or tcp)   TRADDR [eth0's IPv4 address, 10.0.2.15]
#   TRSVCID [4420]   PORTID [1]   NSID [1]
#   BACKEND [nullb-mem]  nullb-mem   memory-backed null_blk (keeps data)
#                        nullb       null_blk without storage (reads zeros; fastest)
#                        file:PATH   file (created with SIZE_MB if missing; served with
#                                    buffered I/O unless BUFFERED_IO=0, as tmpfs has no O_DIRECT)
#                        blk:DEV     an existing block device, e.g. blk:/dev/loop0
#   SIZE_MB [1024]   BS [512] (logical block size of null_blk)
#   HOSTNQN [] empty: allow any host; else a space-separated list of the only host
#              NQNs allowed (the guest's own is in /etc/nvme/hostnqn)
#   INLINE_DATA_SIZE []  port param_inline_data_size (rdma in-capsule data bytes)
#   SERIAL []  subsystem attr_serial      MODEL []  subsystem attr_model
# The port needs an RDMA device on the netdev that owns TRADDR (siw0 on eth0 by default).
set -e
CFG=/sys/kernel/config
N=$CFG/nvmet
NQN=${NQN:-nqn.2024-01.io.nvmetd-lab:kernel-target}
TRTYPE=${TRTYPE:-rdma}
TRADDR=${TRADDR:-$(ip -4 -o addr show dev eth0 | awk '{sub(/\/.*/, "", $4); print $4; exit}')}
TRSVCID=${TRSVCID:-4420}
PORTID=${PORTID:-1}
NSID=${NSID:-1}
BACKEND=${BACKEND:-nullb-mem}
SIZE_MB=${SIZE_MB:-1024}
BS=${BS:-512}

mk_nullb() {  # $1 = memory_backed (0/1); prints the device path
  modprobe null_blk nr_devices=0 2>/dev/null || true
  i=0; while [ -e "$CFG/nullb/labnb$i" ]; do i=$((i+1)); done
  d=$CFG/nullb/labnb$i
  mkdir "$d"
  echo "$SIZE_MB" > "$d/size"
  echo "$BS" > "$d/blocksize"
  echo "$1" > "$d/memory_backed"
  echo 2 > "$d/queue_mode" 2>/dev/null || true
  echo 0 > "$d/irqmode" 2>/dev/null || true
  echo 1 > "$d/power"
  j=0; while [ ! -b "/dev/labnb$i" ] && [ $j -lt 50 ]; do sleep 0.1; j=$((j+1)); done
  [ -b "/dev/labnb$i" ] || { echo "nvmet.sh: /dev/labnb$i did not appear" >&2; exit 1; }
  echo "/dev/labnb$i"
}

case ${1:-} in
setup)
  modprobe nvmet
  modprobe "nvmet-$TRTYPE"
  [ -n "$TRADDR" ] || { echo "nvmet.sh: no TRADDR (eth0 has no IPv4 address?)" >&2; exit 1; }
  S=$N/subsystems/$NQN
  if [ ! -d "$S" ]; then
    mkdir "$S"
    [ -z "${SERIAL:-}" ] || echo "$SERIAL" > "$S/attr_serial"
    [ -z "${MODEL:-}" ] || echo "$MODEL" > "$S/attr_model"
  fi
  if [ -z "${HOSTNQN:-}" ]; then
    echo 1 > "$S/attr_allow_any_host"
  else
    echo 0 > "$S/attr_allow_any_host"
    for h in $HOSTNQN; do
      [ -d "$N/hosts/$h" ] || mkdir "$N/hosts/$h"
      [ -e "$S/allowed_hosts/$h" ] || ln -s "$N/hosts/$h" "$S/allowed_hosts/$h"
    done
  fi
  if [ ! -d "$S/namespaces/$NSID" ]; then
    case $BACKEND in
      nullb-mem) dev=$(mk_nullb 1) ;;
      nullb)     dev=$(mk_nullb 0) ;;
      file:*)    dev=${BACKEND#file:}
                 [ -e "$dev" ] || truncate -s "${SIZE_MB}M" "$dev" ;;
      blk:*)     dev=${BACKEND#blk:}
                 [ -b "$dev" ] || { echo "nvmet.sh: $dev is not a block device" >&2; exit 1; } ;;
      *) echo "nvmet.sh: unknown BACKEND $BACKEND" >&2; exit 2 ;;
    esac
    mkdir "$S/namespaces/$NSID"
    echo -n "$dev" > "$S/namespaces/$NSID/device_path"
    # nvmet opens files with O_DIRECT unless buffered_io is set; tmpfs has no O_DIRECT.
    case $BACKEND in file:*) echo "${BUFFERED_IO:-1}" > "$S/namespaces/$NSID/buffered_io" ;; esac
    echo 1 > "$S/namespaces/$NSID/enable"
  fi
  P=$N/ports/$PORTID
  if [ ! -d "$P" ]; then
    mkdir "$P"
    echo "$TRTYPE" > "$P/addr_trtype"
    echo ipv4 > "$P/addr_adrfam"
    echo "$TRADDR" > "$P/addr_traddr"
    echo "$TRSVCID" > "$P/addr_trsvcid"
    [ -z "${INLINE_DATA_SIZE:-}" ] || echo "$INLINE_DATA_SIZE" > "$P/param_inline_data_size"
  fi
  [ -e "$P/subsystems/$NQN" ] || ln -s "$S" "$P/subsystems/$NQN"
  echo "nvmet: $NQN ns$NSID=$(cat "$S/namespaces/$NSID/device_path") on $(cat "$P/addr_trtype") $(cat "$P/addr_traddr"):$(cat "$P/addr_trsvcid") (port $PORTID, hosts: ${HOSTNQN:-any})"
  ;;
teardown)
  nvme disconnect-all >/dev/null 2>&1 || true
  if [ -d "$N" ]; then
    for l in "$N"/ports/*/subsystems/* "$N"/subsystems/*/allowed_hosts/*; do
      if [ -L "$l" ]; then rm "$l"; fi
    done
    for p in "$N"/ports/*; do if [ -d "$p" ]; then rmdir "$p"; fi; done
    for s in "$N"/subsystems/*; do
      [ -d "$s" ] || continue
      for n in "$s"/namespaces/*; do
        [ -d "$n" ] || continue; echo 0 > "$n/enable"; rmdir "$n"; done
      rmdir "$s"
    done
    for h in "$N"/hosts/*; do if [ -d "$h" ]; then rmdir "$h"; fi; done
  fi
  for d in "$CFG"/nullb/labnb*; do
    [ -d "$d" ] || continue; echo 0 > "$d/power"; rmdir "$d"; done
  echo "nvmet: torn down"
  ;;
show)
  [ -d "$N" ] || { echo "nvmet not loaded"; exit 0; }
  cd "$N" && find . -type f -o -type l | sort | while read -r f; do
    if [ -L "$f" ]; then printf '%s -> %s\n' "$f" "$(readlink "$f")"
    else printf '%s = %s\n' "$f" "$(head -n1 "$f" 2>/dev/null)"; fi; done
  ;;
*) sed -n '2,24p' "$0"; exit 2 ;;
esac
