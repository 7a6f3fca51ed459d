#!/bin/bash
# nvmetd interop lab: control of the QEMU guest(s). See README.md.
#
#   vm.sh [-k SERIES] [-n NAME | -r RUNDIR] COMMAND [ARGS]
#
# -k SERIES / NVMETD_LAB_KERNEL: the guest kernel series that start boots, 6.1
# (default) or 6.12, from $NVMETD_LAB_CACHE/linux-SERIES (built by setup.sh).
# The other commands act on the running instance, whatever its kernel.
#
# Several VMs can run at once; each instance has its own runtime directory
# (pid file, monitor, console log and the 9p share mounted at guest /host):
#   -n NAME / LAB_NAME     $NVMETD_LAB_CACHE/run/NAME   (default NAME: default)
#   -r RUNDIR / LAB_RUN    any directory (used by the Go harness)
#
# Commands:
#   start                  boot in the background, wait until the guest is ready
#   stop                   kill qemu (the guest is stateless) and its watchdog
#   restart                stop + start
#   status                 running? kernel, accel, forwards, readiness (exit 1 if stopped)
#   list                   every running lab qemu on this machine (pid, kernel, rundir)
#   exec [-t SECS] CMD...  run a shell command in the guest; its stdout/stderr are
#                          passed through, exits with its status (124 on timeout)
#   run [-t SECS] SCRIPT [ARGS...]   run a host shell script in the guest
#   put FILE [NAME]        copy a host file to guest /host/bin/NAME (on the guest PATH)
#   get GUEST_PATH [HOST_PATH]       copy a guest file back
#   port GUEST_PORT        print the host port forwarded to GUEST_PORT; adds a
#                          forward from a free 127.0.0.1 port if there is none
#   console                interactive shell on the guest (hvc0; Ctrl-] leaves)
#   log                    the serial console (kernel log)
#   dmesg                  the guest's dmesg (the console log if the guest is dead)
#   share                  print the host directory mounted at guest /host
#
# Env read by start:
#   NVMETD_LAB_CACHE  kernel/initramfs from setup.sh (default /var/cache/nvmetd-lab)
#   NVMETD_LAB_KERNEL kernel series (default 6.1; -k)
#   LAB_FWD           TCP forwards from host 127.0.0.1 to the guest, comma separated:
#                     HOSTPORT:GUESTPORT, or GUESTPORT alone for a free host port
#                     (see "vm.sh port"). Default 4420 (a free host port); "" for none.
#   LAB_SIW           netdevs that get a siw link at boot: eth0 (default), lo,
#                     eth0,lo, or none. Links: siw0 on eth0, siw_<dev> on others.
#   LAB_SRC           host directory mounted read-only at guest /src
#   LAB_MEM (2048) LAB_SMP (2)   guest RAM in MiB / vCPUs
#   LAB_ACCEL         kvm | tcg | auto (default: kvm if it can boot a stock kernel)
#   LAB_BOOT_TIMEOUT  seconds to wait for the guest (default 300 TCG, 120 KVM)
#   LAB_TCG_THREAD    multi (default: one host thread per vCPU) | single (all
#                     vCPUs on one host thread: slower, but immune to the MTTCG
#                     code-patching race below)
#   LAB_TCG_TSC       the guest's tsc= option under TCG (default reliable; "" for
#                     none). Under TCG the guest's TSC is the host's (invariant,
#                     synchronized), but on a loaded host the clocksource watchdog
#                     sees a vCPU thread descheduled between its reads as skew and
#                     marks the TSC unstable; that flips the __sched_clock_stable
#                     static key, i.e. patches kernel text (text_poke_bp) while the
#                     other vCPU runs it, and QEMU 7.2's multi-threaded TCG can then
#                     execute the transient int3 after the patch is done: "Oops:
#                     int3" and a panic (docs/linux-interop.md, "QEMU TCG: Oops:
#                     int3"; fixed in QEMU 8.1 by deba78709ae8). tsc=reliable turns
#                     that watchdog off for the TSC.
#   LAB_WATCH_PID     stop the VM when this process exits (the Go harness sets it
#                     to the test binary, so a killed test leaves no qemu behind)
#
# The guest: eth0 10.0.2.15/24 under QEMU user networking; 10.0.2.2:PORT in the
# guest reaches the host's 127.0.0.1:PORT.
set -euo pipefail

CACHE=${NVMETD_LAB_CACHE:-/var/cache/nvmetd-lab}
die() { echo "vm.sh: $*" >&2; exit 1; }

NAME=${LAB_NAME:-default}
RUN=${LAB_RUN:-}
KSERIES=${NVMETD_LAB_KERNEL:-6.1}
while [ $# -gt 0 ]; do
  case $1 in
    -k) KSERIES=${2:?-k SERIES}; shift 2 ;;
    -n) NAME=${2:?-n NAME}; RUN=""; shift 2 ;;
    -r) RUN=${2:?-r RUNDIR}; shift 2 ;;
    *) break ;;
  esac
done
if [ -z "$RUN" ]; then
  case $NAME in *[!A-Za-z0-9_.-]*|"") die "bad instance name '$NAME'" ;; esac
  RUN="$CACHE/run/$NAME"
else
  mkdir -p "$RUN"; RUN=$(cd "$RUN" && pwd)
  NAME=$(basename "$RUN")
fi
[[ $KSERIES =~ ^[0-9]+\.[0-9]+$ ]] || die "bad kernel series '$KSERIES' (6.1 or 6.12)"
KDIR="$CACHE/linux-$KSERIES"
SHARE="$RUN/share"
PIDF="$RUN/qemu.pid"
MON="$RUN/mon.sock"
[ ${#MON} -lt 100 ] || die "runtime dir path too long for a unix socket: $RUN"

qpid() {  # print the pid of this instance's qemu if it runs
  local pid
  [ -f "$PIDF" ] || return 1
  pid=$(cat "$PIDF" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline" | grep -qF -- "-pidfile $PIDF " || return 1
  echo "$pid"
}
running() { qpid >/dev/null; }

monitor() {  # send one HMP command; print the reply
  [ -S "$MON" ] || die "no monitor socket $MON"
  { printf '%s\n' "$1"; sleep 0.3; } | socat -t 1 - "UNIX-CONNECT:$MON" 2>/dev/null |
    tr -d '\r' | sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' | { grep -v -e '^QEMU .* monitor' -e '^(qemu)' || true; }
}

# record_ports: $RUN/ports gets one "GUESTPORT HOSTPORT" line per TCP host forward
record_ports() {
  monitor "info usernet" |
    awk '$1=="TCP[HOST_FORWARD]" {print $6, $4}' | sort -n -u > "$RUN/ports.tmp"
  mv "$RUN/ports.tmp" "$RUN/ports"
}

console_tail() { echo "--- console ($RUN/console.log), last ${1:-40} lines:" >&2; tail -n "${1:-40}" "$RUN/console.log" >&2 || true; }

kill_qemu() {
  local pid w
  if w=$(cat "$RUN/watchdog.pid" 2>/dev/null) && [ -n "$w" ]; then
    kill "$w" 2>/dev/null || true
    rm -f "$RUN/watchdog.pid"
  fi
  pid=$(qpid) || { rm -f "$PIDF"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  kill -0 "$pid" 2>/dev/null && die "qemu pid $pid does not die"
  rm -f "$PIDF" "$SHARE/state/ready" "$MON"
  echo "$pid"
}

kvm_usable() {
  [ -r /dev/kvm ] && [ -w /dev/kvm ] || return 1
  # kvm_pvm (software nested virtualisation) only runs PVM-enabled guest kernels;
  # the stock Debian kernel hangs on it right after the real-mode setup.
  if [ -d /sys/module/kvm_pvm ] && [ ! -d /sys/module/kvm_intel ] && [ ! -d /sys/module/kvm_amd ]; then
    echo "vm.sh: /dev/kvm is kvm_pvm (cannot boot a stock kernel); using TCG" >&2
    return 1
  fi
}

cmd_start() {
  if running; then
    local k; k=$(cat "$RUN/kernel" 2>/dev/null || echo unknown)
    [ "$k" = "$KSERIES" ] || die "$NAME is already running with Linux $k, not $KSERIES (stop it first)"
    echo "$NAME already running (pid $(qpid), Linux $k, accel $(cat "$RUN/accel" 2>/dev/null))"
    return 0
  fi
  [ -f "$KDIR/vmlinuz" ] && [ -f "$KDIR/initrd.img" ] ||
    die "no $KDIR/vmlinuz or initrd.img: run NVMETD_LAB_KERNEL=$KSERIES test/lab/setup.sh first"
  command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not installed: run test/lab/setup.sh"
  mkdir -p "$SHARE"/{jobs,bin,out,state}
  rm -f "$SHARE"/state/ready "$SHARE"/jobs/* "$RUN"/*.sock "$PIDF" "$RUN/ports" "$RUN/watchdog.pid"
  : > "$RUN/console.log"
  echo "$KSERIES" > "$RUN/kernel"

  local fwdspec=${LAB_FWD-4420} fwd="" f
  for f in ${fwdspec//,/ }; do
    case $f in
      *:*) fwd+=",hostfwd=tcp:127.0.0.1:${f%%:*}-:${f##*:}" ;;
      *)   fwd+=",hostfwd=tcp:127.0.0.1:0-:$f" ;;
    esac
  done
  local siw=${LAB_SIW:-eth0}
  local append="console=ttyS0 panic=-1 loglevel=6 lab.siw=$siw lab.name=$NAME"
  local extra=()
  if [ -n "${LAB_SRC:-}" ]; then
    extra+=(-fsdev "local,id=fs1,path=$(realpath "$LAB_SRC"),security_model=none,readonly=on"
            -device virtio-9p-pci,fsdev=fs1,mount_tag=src)
    append+=" lab.src=1"
  fi
  local base=(qemu-system-x86_64 -name "nvmetd-lab-$NAME" -nodefaults -no-user-config
    -display none -vga none -no-reboot
    -smp "${LAB_SMP:-2}" -m "${LAB_MEM:-2048}"
    -kernel "$KDIR/vmlinuz" -initrd "$KDIR/initrd.img"
    -serial "file:$RUN/console.log"
    -monitor "unix:$MON,server=on,wait=off"
    -netdev "user,id=n0,net=10.0.2.0/24,host=10.0.2.2$fwd"
    -device virtio-net-pci,netdev=n0
    -fsdev "local,id=fs0,path=$SHARE,security_model=none"
    -device virtio-9p-pci,fsdev=fs0,mount_tag=host0
    -device virtio-serial-pci
    -chardev "socket,id=sh0,path=$RUN/shell.sock,server=on,wait=off"
    -device virtconsole,chardev=sh0
    -device virtio-rng-pci
    "${extra[@]}"
    -daemonize -pidfile "$PIDF")

  local want=${LAB_ACCEL:-auto} accel="" t0=$SECONDS
  if [ "$want" != tcg ] && kvm_usable; then
    if "${base[@]}" -append "$append" -machine q35,accel=kvm -cpu host 2>"$RUN/qemu.err"; then
      accel=kvm
    else
      echo "vm.sh: KVM start failed: $(cat "$RUN/qemu.err")" >&2
      [ "$want" = kvm ] && exit 1
    fi
  elif [ "$want" = kvm ]; then
    die "LAB_ACCEL=kvm but /dev/kvm is not usable"
  fi
  if [ -z "$accel" ]; then
    local tsc=${LAB_TCG_TSC-reliable}
    "${base[@]}" -append "$append${tsc:+ tsc=$tsc}" -machine q35 -accel "tcg,thread=${LAB_TCG_THREAD:-multi}" -cpu max 2>"$RUN/qemu.err" ||
      die "qemu failed to start: $(cat "$RUN/qemu.err")"
    accel=tcg
  fi
  echo "$accel" > "$RUN/accel"
  local pid; pid=$(qpid) || die "qemu started but its pid file is missing"
  if [ -n "${LAB_WATCH_PID:-}" ]; then
    # A detached watchdog: when the watched process exits, the VM goes too.
    setsid bash -c 'while kill -0 '"$LAB_WATCH_PID"' 2>/dev/null && kill -0 '"$pid"' 2>/dev/null; do sleep 1; done
      if kill -0 '"$pid"' 2>/dev/null; then kill -TERM '"$pid"'; sleep 3; kill -KILL '"$pid"' 2>/dev/null; fi' \
      </dev/null >/dev/null 2>&1 &
    echo $! > "$RUN/watchdog.pid"
  fi
  record_ports || true
  echo "$NAME: qemu pid $pid, Linux $KSERIES ($(cat "$KDIR/kver" 2>/dev/null)), accel=$accel; waiting for the guest ($RUN)"

  local lim=${LAB_BOOT_TIMEOUT:-$([ $accel = kvm ] && echo 120 || echo 300)}
  while [ ! -f "$SHARE/state/ready" ]; do
    if ! running; then
      console_tail; die "qemu exited during boot"
    fi
    if grep -q -e 'Kernel panic' -e 'nvmetd-lab: FATAL' "$RUN/console.log"; then
      sleep 1; console_tail; kill_qemu >/dev/null; die "guest failed to boot"
    fi
    if [ $accel = kvm ] && [ $((SECONDS - t0)) -ge 60 ] && ! grep -q 'Run /init' "$RUN/console.log"; then
      echo "vm.sh: no kernel progress under KVM after 60s; restarting with TCG" >&2
      kill_qemu >/dev/null; LAB_ACCEL=tcg cmd_start; return
    fi
    if [ $((SECONDS - t0)) -ge "$lim" ]; then
      console_tail; kill_qemu >/dev/null; die "guest not ready after ${lim}s (LAB_BOOT_TIMEOUT)"
    fi
    sleep 0.2
  done
  echo "$NAME: guest ready in $((SECONDS - t0))s (Linux $KSERIES, accel=$accel)"
  sed 's/^/  /' "$SHARE/state/ready"
  [ -s "$RUN/ports" ] && echo "  forwards (guest port, host 127.0.0.1 port): $(tr '\n' ';' < "$RUN/ports")"
  return 0
}

cmd_stop() {
  local pid
  if ! running; then
    kill_qemu >/dev/null  # a stale watchdog or pid file
    echo "$NAME not running"; return 0
  fi
  pid=$(kill_qemu)
  echo "$NAME stopped (pid $pid)"
}

cmd_status() {
  if running; then
    echo "$NAME running: pid $(qpid) Linux $(cat "$RUN/kernel" 2>/dev/null) accel=$(cat "$RUN/accel") share=$SHARE"
    [ -s "$RUN/ports" ] && echo "  forwards (guest port, host 127.0.0.1 port): $(tr '\n' ';' < "$RUN/ports")"
    if [ -f "$SHARE/state/ready" ]; then sed 's/^/  /' "$SHARE/state/ready"; else echo "  (guest not ready)"; fi
  else
    echo "$NAME stopped ($RUN)"; return 1
  fi
}

cmd_list() {
  local p cmd rd
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' 2>/dev/null < "$p/cmdline") || continue
    case $cmd in
      qemu-system-x86_64\ -name\ nvmetd-lab-*)
        rd=$(sed -n 's/.*-pidfile \([^ ]*\)\/qemu.pid .*/\1/p' <<<"$cmd")
        echo "pid ${p#/proc/} Linux $(cat "$rd/kernel" 2>/dev/null || echo '?') rundir $rd" ;;
    esac
  done
}

# copy_new FILE OFFSETVAR: writes the bytes of FILE past offset $OFFSETVAR, up
# to FILE's size when it starts, to stdout, and advances $OFFSETVAR. The guest
# may append to FILE meanwhile (a job's output grows while the host copies it),
# so a single dd copies exactly that range. (A "tail -c +N | head -c LEN" pipe
# here used to die of SIGPIPE whenever the file had grown between the stat and
# the tail: head exits after LEN bytes while tail still writes, and under
# pipefail and set -e vm.sh exited with status 141 in the middle of the
# output, losing the rest of it and the command's exit status.)
copy_new() {
  local f=$1 var=$2 off sz
  off=${!var}
  sz=$(stat -c %s "$f" 2>/dev/null) || return 0
  [ "$sz" -gt "$off" ] || return 0
  dd if="$f" iflag=skip_bytes,count_bytes skip="$off" count=$((sz - off)) bs=64K status=none
  printf -v "$var" %s "$sz"
}

cmd_exec() {
  local tmo=0
  if [ "${1:-}" = -t ]; then tmo=$2; shift 2; fi
  [ "${1:-}" = -- ] && shift
  [ $# -gt 0 ] || die "exec: no command"
  running || die "$NAME is not running"
  [ -f "$SHARE/state/ready" ] || die "$NAME: guest not ready"
  local id; id=sh-$(date +%s%N)-$$
  local J="$SHARE/jobs"
  { echo "echo \$\$ > /host/jobs/$id.pid"; printf '%s\n' "$*"; } > "$J/$id.tmp"
  mv "$J/$id.tmp" "$J/$id.job"
  local oo=0 eo=0 start=$SECONDS rc="" n=0
  while :; do
    if [ -f "$J/$id.out" ]; then
      copy_new "$J/$id.out" oo
      copy_new "$J/$id.err" eo >&2
    fi
    [ -f "$J/$id.rc" ] && break
    if [ "$tmo" != 0 ] && [ $((SECONDS-start)) -ge "$tmo" ]; then
      local pid; pid=$(cat "$J/$id.pid" 2>/dev/null || true)
      [ -n "$pid" ] && cmd_exec -t 5 "kill -TERM -- -$pid 2>/dev/null || kill -TERM $pid" >/dev/null 2>&1 || true
      echo "vm.sh: timeout after ${tmo}s" >&2
      rc=124; break
    fi
    n=$((n+1))
    if [ $((n % 40)) = 0 ] && ! running; then
      console_tail 20; die "$NAME: qemu died while running the command"
    fi
    sleep 0.05
  done
  if [ "$rc" = 124 ]; then
    sleep 0.5; rm -f "$J/$id".*; return 124
  fi
  # The job has ended: what is in the files now is all of it.
  copy_new "$J/$id.out" oo
  copy_new "$J/$id.err" eo >&2
  rc=$(cat "$J/$id.rc")
  rm -f "$J/$id".*
  return "$rc"
}

cmd_run() {
  local t=()
  if [ "${1:-}" = -t ]; then t=(-t "$2"); shift 2; fi
  local f=${1:?script}; shift
  mkdir -p "$SHARE/bin/.scripts"
  local n; n=$(basename "$f")-$$
  cp "$f" "$SHARE/bin/.scripts/$n"
  local q="" a; for a in "$@"; do q+=" $(printf '%q' "$a")"; done
  local rc=0
  cmd_exec "${t[@]}" "sh /host/bin/.scripts/$n$q" || rc=$?
  rm -f "$SHARE/bin/.scripts/$n"
  return $rc
}

cmd_put() {
  local f=${1:?file} n=${2:-$(basename "${1:-}")}
  mkdir -p "$SHARE/bin"
  cp "$f" "$SHARE/bin/.$n.tmp" && chmod +x "$SHARE/bin/.$n.tmp" && mv "$SHARE/bin/.$n.tmp" "$SHARE/bin/$n"
  echo "/host/bin/$n"
}

cmd_get() {
  local g=${1:?guest path} h=${2:-.}
  local n; n=$(basename "$g").$$
  cmd_exec "cp '$g' /host/out/$n"
  [ -d "$h" ] && h="${h%/}/$(basename "$g")"
  mv "$SHARE/out/$n" "$h"
  echo "$h"
}

cmd_port() {
  local gp=${1:?guest port} hp
  running || die "$NAME is not running"
  [ -f "$RUN/ports" ] || record_ports
  hp=$(awk -v g="$gp" '$1==g {print $2; exit}' "$RUN/ports")
  if [ -z "$hp" ]; then
    exec 8>"$RUN/.port.lock"; flock 8
    record_ports
    hp=$(awk -v g="$gp" '$1==g {print $2; exit}' "$RUN/ports")
    if [ -z "$hp" ]; then
      local out; out=$(monitor "hostfwd_add n0 tcp:127.0.0.1:0-:$gp")
      [ -z "$out" ] || die "hostfwd_add: $out"
      record_ports
      hp=$(awk -v g="$gp" '$1==g {print $2; exit}' "$RUN/ports")
    fi
    [ -n "$hp" ] || die "no forward to guest port $gp"
  fi
  echo "$hp"
}

cmd_console() {
  running || die "$NAME is not running"
  echo "guest shell on hvc0 (Ctrl-] to leave)" >&2
  socat -,raw,echo=0,escape=0x1d "UNIX-CONNECT:$RUN/shell.sock"
}

cmd_dmesg() {
  if running && [ -f "$SHARE/state/ready" ] && cmd_exec -t 10 dmesg; then return 0; fi
  echo "vm.sh: guest dmesg unavailable; console log:" >&2
  cat "$RUN/console.log"
}

c=${1:-status}; shift || true
case $c in
  start) cmd_start "$@" ;;
  stop) cmd_stop ;;
  restart) cmd_stop; cmd_start "$@" ;;
  status) cmd_status ;;
  list) cmd_list ;;
  exec) cmd_exec "$@" ;;
  run) cmd_run "$@" ;;
  put) cmd_put "$@" ;;
  get) cmd_get "$@" ;;
  port) cmd_port "$@" ;;
  console) cmd_console ;;
  log) cat "$RUN/console.log" ;;
  dmesg) cmd_dmesg ;;
  share) echo "$SHARE" ;;
  help|-h|--help) sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' ;;
  *) die "unknown command '$c' (vm.sh help)" ;;
esac
