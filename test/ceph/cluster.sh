#!/usr/bin/env bash
# test/ceph/cluster.sh: a throwaway single-node Ceph cluster for the tests.
#
#   cluster.sh start    start it (idempotent: a running cluster is left alone)
#   cluster.sh stop     stop its daemons and remove its state (idempotent)
#   cluster.sh status   exit 0 if it is running and serves I/O, 1 if not
#   cluster.sh env      print its client settings as NAME=value lines
#
# One monitor and NVMETD_CEPH_OSDS OSDs (default 3; memstore: objects in RAM,
# each OSD capped at NVMETD_CEPH_MEM), no manager, cephx on, on one address
# (NVMETD_CEPH_ADDR, default 127.0.0.1); the daemons run directly
# (daemonised, with pid files), never through systemd. One pool ($POOL,
# initialised for RBD; replicated across OSDs: size 3 and min_size 2 with
# three OSDs or more, size 2 min_size 1 with two, size 1 with one) and one
# client, client.nvmetd, with the capabilities a gateway has (mon and osd
# "profile rbd": RBD I/O, and blocklisting through the monitor).
#
# Packages (Debian's Ceph: 16.2 "pacific" on Debian 12): ceph-mon, ceph-osd,
# ceph-common (ceph, rbd, rados, the tools) and librbd-dev/librados-dev (for
# building the rbd backend with cgo). When one is missing and we are root,
# apt-get installs it; otherwise the script names what to install and fails.
#
# Several clusters can run at once, one per directory (NVMETD_CEPH_DIR or
# --dir); each picks free loopback ports. start and stop serialise on a lock
# in the directory, so concurrent test processes share one cluster safely.
#
# Env:
#   NVMETD_CEPH_DIR     state directory (default /tmp/nvmetd-ceph-<n>, n a checksum
#                       of this script's directory: one cluster per checkout)
#   NVMETD_CEPH_MEM     memstore capacity of each OSD in bytes (default 4 GiB;
#                       RAM is only used for what is written)
#   NVMETD_CEPH_OSDS    number of OSDs (default 3: every object on three OSDs,
#                       so that a test can cut a client from some of them)
#   NVMETD_CEPH_ADDR    IPv4 address the daemons bind to (default 127.0.0.1);
#                       it must be an address of this machine already (the
#                       gateway tests bind it to an interface they create, so
#                       that gateways in network namespaces reach the cluster)
#   NVMETD_CEPH_NOAPT=1 never call apt-get
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "$0")" && pwd)
DIR=${NVMETD_CEPH_DIR:-/tmp/nvmetd-ceph-$(printf %s "$SCRIPT_DIR" | cksum | cut -d' ' -f1)}
POOL=rbd
MEM=${NVMETD_CEPH_MEM:-$((4 << 30))}
OSDS=${NVMETD_CEPH_OSDS:-3}
ADDR=${NVMETD_CEPH_ADDR:-127.0.0.1}
NOAPT=${NVMETD_CEPH_NOAPT:-0}
CLIENT=nvmetd
# Bounds of every wait (seconds).
BOOT_TIMEOUT=${NVMETD_CEPH_BOOT_TIMEOUT:-90}
STOP_TIMEOUT=10

export LC_ALL=C
T0=${EPOCHREALTIME/./}
log() { local d=$(( (${EPOCHREALTIME/./} - T0) / 100000 )); printf '[ceph %3d.%ds] %s\n' $((d/10)) $((d%10)) "$*" >&2; }
die() { printf '[ceph] ERROR: %s\n' "$*" >&2; exit 1; }

usage() {
	sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

cmd=""
while [ $# -gt 0 ]; do
	case $1 in
	--dir) DIR=$2; shift 2 ;;
	--dir=*) DIR=${1#--dir=}; shift ;;
	start | stop | status | env) cmd=$1; shift ;;
	-h | --help) usage ;;
	*) echo "cluster.sh: unknown argument $1" >&2; usage ;;
	esac
done
[ -n "$cmd" ] || usage
[[ $OSDS =~ ^[1-9]$ ]] || { echo "cluster.sh: NVMETD_CEPH_OSDS=$OSDS: 1 to 9" >&2; exit 2; }
[[ $ADDR =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "cluster.sh: NVMETD_CEPH_ADDR=$ADDR: an IPv4 address" >&2; exit 2; }
# The admin sockets live in $DIR/run; Unix socket paths are at most 107 bytes.
[ ${#DIR} -le 64 ] || die "state directory $DIR is longer than 64 characters (admin socket paths would not fit)"
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac

CONF=$DIR/ceph.conf
ADMIN=(--conf "$CONF" --name client.admin --keyring "$DIR/admin.keyring")

# ensure_packages installs what is missing (as root) or fails naming it.
ensure_packages() {
	local need=()
	command -v ceph-mon >/dev/null 2>&1 || need+=(ceph-mon)
	command -v ceph-osd >/dev/null 2>&1 || need+=(ceph-osd)
	for t in ceph rbd rados ceph-authtool monmaptool; do
		command -v $t >/dev/null 2>&1 || need+=(ceph-common)
	done
	[ -e /usr/include/rbd/librbd.h ] || need+=(librbd-dev)
	[ -e /usr/include/rados/librados.h ] || need+=(librados-dev)
	command -v uuidgen >/dev/null 2>&1 || need+=(uuid-runtime)
	command -v ss >/dev/null 2>&1 || need+=(iproute2)
	command -v flock >/dev/null 2>&1 || need+=(util-linux)
	[ ${#need[@]} -gt 0 ] || return 0
	mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
	[ "$NOAPT" != 1 ] || die "missing packages: ${need[*]} (NVMETD_CEPH_NOAPT=1)"
	[ "$(id -u)" = 0 ] || die "missing packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})"
	log "apt-get install ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	local opts=(-y -q -o DPkg::Lock::Timeout=900 -o APT::Install-Recommends=false)
	if ! apt-get install "${opts[@]}" "${need[@]}" >/tmp/nvmetd-ceph-apt.log 2>&1; then
		apt-get update -q -o DPkg::Lock::Timeout=900 >>/tmp/nvmetd-ceph-apt.log 2>&1 || true
		apt-get install "${opts[@]}" "${need[@]}" >>/tmp/nvmetd-ceph-apt.log 2>&1 ||
			{ tail -n 20 /tmp/nvmetd-ceph-apt.log >&2; die "apt-get install ${need[*]} failed"; }
	fi
}

# pid_alive FILE: the daemon whose pid FILE holds is running, and is ours:
# a ceph daemon started with this cluster's ceph.conf (a stale pid file's
# number may belong to another process by now, which must not be killed).
pid_alive() {
	local pid cmd
	[ -s "$1" ] && pid=$(<"$1") && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
	cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
	[[ $cmd == ceph-* && $cmd == *" -c $CONF "* ]]
}

# osd_ids: the OSDs of the cluster in $DIR as it was started (its OSD
# directories; a cluster started by an older script has osd/0 only), else
# of the one to start.
osd_ids() {
	local ids
	ids=$(ls "$DIR/osd" 2>/dev/null | grep -E '^[0-9]+$' | sort -n) || true
	if [ -n "$ids" ]; then echo "$ids"; else seq 0 $((OSDS - 1)); fi
}

# running: every daemon is alive (no I/O check).
running() {
	[ -f "$CONF" ] && pid_alive "$DIR/run/mon.a.pid" || return 1
	local i
	for i in $(osd_ids); do
		pid_alive "$DIR/run/osd.$i.pid" || return 1
	done
}

# serves: a client can write and read an object in the pool, within 10 s.
serves() {
	running || return 1
	timeout 15 rados "${ADMIN[@]}" --pool "$POOL" \
		--rados-osd-op-timeout 10 --rados-mon-op-timeout 10 --client-mount-timeout 10 \
		stat nvmetd-probe >/dev/null 2>&1
}

# free_port: a TCP port nothing listens on in 20000..29999, away from Ceph's
# own defaults (3300, 6789, 6800-7300), chosen at random.
free_port() {
	local p used
	used=$(ss -Htan | awk '{ n = split($4, a, ":"); print a[n] }' | sort -u)
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 10000))
		grep -qx "$p" <<<"$used" || { echo "$p"; return; }
	done
	die "no free TCP port found"
}

# stop_daemon NAME: SIGTERM the daemon (mon.a or osd.N), wait up to
# STOP_TIMEOUT seconds, then SIGKILL. The OSD goes first: it tells the
# monitor it is going down, and waits osd_mon_shutdown_timeout for it.
stop_daemon() {
	local name=$1 pids=() pid
	pid_alive "$DIR/run/$name.pid" && pids+=("$(<"$DIR/run/$name.pid")")
	# One killed before it wrote its pid file: found by its command line.
	while read -r pid; do
		pids+=("$pid")
	done < <(pgrep -f -- "^ceph-${name%%.*} -c $CONF -i ${name#*.}\$" || true)
	[ ${#pids[@]} -gt 0 ] || return 0
	kill -TERM "${pids[@]}" 2>/dev/null || true
	for i in $(seq $(( (STOP_TIMEOUT + 5) * 10 ))); do
		local alive=0
		for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
		[ $alive = 1 ] || return 0
		if [ "$i" = $((STOP_TIMEOUT * 10)) ]; then
			log "$name still running after ${STOP_TIMEOUT}s: SIGKILL ${pids[*]}"
			kill -KILL "${pids[@]}" 2>/dev/null || true
		fi
		sleep 0.1
	done
	die "$name (${pids[*]}) survives SIGKILL"
}

kill_daemons() {
	local i
	# Every OSD a directory or the daemons file names (a start that failed
	# half way has some of them).
	for i in $(osd_ids); do
		stop_daemon "osd.$i"
	done
	stop_daemon mon.a
}

# wipe removes the state, keeping the lock file.
wipe() {
	find "$DIR" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
}

write_conf() {
	local fsid=$1 port=$2 size=1 min_size=1
	[ "$OSDS" -lt 2 ] || { size=2; min_size=1; }
	[ "$OSDS" -lt 3 ] || { size=3; min_size=2; }
	cat >"$CONF" <<EOF
# Written by test/ceph/cluster.sh: a single-node test cluster ($OSDS OSDs) on $ADDR.
[global]
fsid = $fsid
mon_host = v2:$ADDR:$port
public_addr = $ADDR
cluster_addr = $ADDR
ms_bind_msgr1 = false
ms_bind_ipv4 = true
ms_bind_ipv6 = false
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
# Replicas on distinct OSDs of this one host (chooseleaf type 0: osd).
osd_pool_default_size = $size
osd_pool_default_min_size = $min_size
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_crush_chooseleaf_type = 0
# Not the system's /var/run/ceph and /var/log/ceph.
run_dir = $DIR/run
admin_socket = $DIR/run/\$name.\$pid.asok
log_file = /dev/null

[client.admin]
keyring = $DIR/admin.keyring

[mon]
mon_data = $DIR/mon/\$id
pid_file = $DIR/run/\$name.pid
admin_socket = $DIR/run/\$name.asok
log_file = $DIR/log/\$name.log
mon_allow_pool_delete = true
# One monitor on a loaded 2-core machine: do not wait for peers.
mon_initial_members = a
mon_lease = 5
mon_osd_down_out_interval = 0
mon_data_avail_warn = 1
mon_data_avail_crit = 0

[osd]
osd_data = $DIR/osd/\$id
osd_objectstore = memstore
memstore_device_bytes = $MEM
pid_file = $DIR/run/\$name.pid
admin_socket = $DIR/run/\$name.asok
log_file = $DIR/log/\$name.log
keyring = $DIR/osd/\$id/keyring
# Two cores: few threads.
osd_op_num_shards = 2
osd_op_num_threads_per_shard = 1
osd_max_backfills = 1
osd_scrub_begin_hour = 0
osd_scrub_end_hour = 0
osd_scrub_during_recovery = false
osd_heartbeat_grace = 20
EOF
}

start() {
	if running && serves; then
		log "already running in $DIR"
		return 0
	fi
	ensure_packages
	kill_daemons
	wipe
	case $ADDR in
	127.*) ;;
	*) ip -o -4 addr show 2>/dev/null | grep -q " inet $ADDR/" ||
		die "NVMETD_CEPH_ADDR=$ADDR is not an address of this machine (the caller creates it)" ;;
	esac
	local ids i
	ids=$(seq 0 $((OSDS - 1)))
	mkdir -p "$DIR/run" "$DIR/log" "$DIR/mon"
	for i in $ids; do mkdir -p "$DIR/osd/$i"; done

	local fsid port
	fsid=$(uuidgen)
	port=$(free_port)
	write_conf "$fsid" "$port"

	# Every key the cluster knows goes into the monitor's keyring before
	# --mkfs, which makes it the initial auth database: no ceph CLI round
	# trips (each costs a second or two of Python start-up) to add them.
	local K=ceph-authtool
	$K --create-keyring "$DIR/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
	$K --create-keyring "$DIR/admin.keyring" --gen-key -n client.admin \
		--cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
	for i in $ids; do
		$K --create-keyring "$DIR/osd/$i/keyring" --gen-key -n "osd.$i" \
			--cap mon 'allow profile osd' --cap osd 'allow *' --cap mgr 'allow profile osd' >/dev/null
	done
	$K --create-keyring "$DIR/client.$CLIENT.keyring" --gen-key -n "client.$CLIENT" \
		--cap mon 'profile rbd' --cap osd "profile rbd pool=$POOL" --cap mgr "profile rbd pool=$POOL" >/dev/null
	for k in admin.keyring $(for i in $ids; do echo "osd/$i/keyring"; done) "client.$CLIENT.keyring"; do
		$K "$DIR/mon.keyring" --import-keyring "$DIR/$k" >/dev/null
	done
	monmaptool --create --fsid "$fsid" --addv a "[v2:$ADDR:$port]" "$DIR/monmap" >/dev/null

	log "monitor a on $ADDR:$port (fsid $fsid)"
	ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" \
		--keyring "$DIR/mon.keyring" >"$DIR/log/mon-mkfs.log" 2>&1 ||
		{ cat "$DIR/log/mon-mkfs.log" >&2; die "ceph-mon --mkfs failed"; }
	# The daemons must not inherit the lock (fd 8).
	ceph-mon -c "$CONF" -i a >"$DIR/log/mon-start.log" 2>&1 8>&- ||
		{ cat "$DIR/log/mon-start.log" >&2; die "ceph-mon failed to start (log: $DIR/log/mon.a.log)"; }

	# One ceph CLI session (each costs a second of Python start-up): give
	# each OSD its UUID (it then exists and may boot) and create the pool
	# (its size from osd_pool_default_size; rbd pool init tags it later).
	local out cmds="" uuids=()
	for i in $ids; do
		uuids[i]=$(uuidgen)
		cmds+="osd new ${uuids[i]} $i"$'\n'
	done
	cmds+="osd pool create $POOL $((8 * OSDS)) $((8 * OSDS)) replicated"$'\n'
	out=$(printf %s "$cmds" | timeout 60 ceph "${ADMIN[@]}" --connect-timeout 30 2>&1) ||
		{ echo "$out" >&2; die "ceph osd new / osd pool create failed (monitor log: $DIR/log/mon.a.log)"; }
	grep -qx "pool '$POOL' created" <<<"$out" && [ "$(grep -E '^[0-9]+$' <<<"$out" | tr '\n' ' ')" = "$(printf '%s ' $ids)" ] ||
		{ echo "$out" >&2; die "ceph osd new / osd pool create: unexpected answer"; }

	# mkfs one after the other (each is short), then start them all.
	log "$OSDS OSDs (memstore, $((MEM >> 20)) MiB each)"
	for i in $ids; do
		ceph-osd -c "$CONF" -i "$i" --mkfs --osd-uuid "${uuids[i]}" >"$DIR/log/osd-mkfs.$i.log" 2>&1 ||
			{ cat "$DIR/log/osd-mkfs.$i.log" >&2; die "ceph-osd --mkfs of osd.$i failed"; }
		ceph-osd -c "$CONF" -i "$i" >"$DIR/log/osd-start.$i.log" 2>&1 8>&- ||
			{ cat "$DIR/log/osd-start.$i.log" >&2; die "ceph-osd $i failed to start (log: $DIR/log/osd.$i.log)"; }
	done

	# Wait until the OSDs are up and the pool's placement groups serve I/O:
	# without a manager there is no PG state to poll, so write an object;
	# then until every OSD is up and in (with min_size 2 the write needs
	# only two; a test that cuts a client from one OSD needs them all).
	log "waiting for the OSDs to serve I/O"
	local deadline=$((SECONDS + BOOT_TIMEOUT))
	until timeout 20 rados "${ADMIN[@]}" --pool "$POOL" --rados-osd-op-timeout 5 --rados-mon-op-timeout 5 \
		--client-mount-timeout 5 create nvmetd-probe >/dev/null 2>&1 ||
		timeout 20 rados "${ADMIN[@]}" --pool "$POOL" --rados-osd-op-timeout 5 stat nvmetd-probe >/dev/null 2>&1; do
		for i in $ids; do
			pid_alive "$DIR/run/osd.$i.pid" || { tail -n 30 "$DIR/log/osd.$i.log" >&2; die "osd.$i died"; }
		done
		[ $SECONDS -lt $deadline ] || die "the OSDs did not serve I/O within ${BOOT_TIMEOUT}s (logs in $DIR/log)"
		sleep 0.2
	done
	if [ "$OSDS" -gt 1 ]; then
		until [ "$(timeout 30 ceph "${ADMIN[@]}" --connect-timeout 20 osd stat 2>/dev/null |
			sed -n 's/^\([0-9]*\) osds: \([0-9]*\) up.*, \([0-9]*\) in.*/\1 \2 \3/p')" = "$OSDS $OSDS $OSDS" ]; do
			[ $SECONDS -lt $deadline ] || die "not every OSD up and in within ${BOOT_TIMEOUT}s (logs in $DIR/log)"
			sleep 0.5
		done
	fi
	timeout 60 rbd "${ADMIN[@]}" pool init "$POOL" >/dev/null || die "rbd pool init $POOL failed"
	log "running in $DIR"
}

stop() {
	[ -d "$DIR" ] || return 0
	kill_daemons
	wipe
	log "stopped; $DIR removed"
}

env_lines() {
	cat <<EOF
CEPH_CONF=$CONF
CEPH_KEYRING=$DIR/client.$CLIENT.keyring
CEPH_CLIENT_ID=$CLIENT
CEPH_POOL=$POOL
CEPH_ADMIN_KEYRING=$DIR/admin.keyring
CEPH_FSID=$(awk '$1 == "fsid" { print $3 }' "$CONF")
CEPH_MON_HOST=$(awk '$1 == "mon_host" { print $3 }' "$CONF")
CEPH_DIR=$DIR
CEPH_DAEMONS=mon.a$(for i in $(osd_ids); do printf ' osd.%s' "$i"; done)
CEPH_ADDR=$(awk '$1 == "public_addr" { print $3 }' "$CONF")
EOF
}

mkdir -p "$DIR"
exec 8>"$DIR/.lock"
flock -w 300 8 || die "timed out waiting for $DIR/.lock"

case $cmd in
start) start ;;
stop) stop ;;
status)
	if serves; then echo "running in $DIR"; else echo "not running ($DIR)"; exit 1; fi
	;;
env)
	running || die "not running ($DIR); run: $0 start"
	env_lines
	;;
esac
