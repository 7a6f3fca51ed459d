#!/bin/sh
# Guest job runner (respawned by busybox init). The host (vm.sh exec, or the Go
# harness test/interop/lab) drops a shell script /host/jobs/<id>.job, written
# atomically by rename. The runner renames it to <id>.run and executes it in a
# new session, concurrently with other jobs, with stdout in <id>.out and stderr
# in <id>.err; when it exits, it writes the exit status to <id>.rc (atomically,
# by rename). Job scripts written by the host start with
# "echo $$ > /host/jobs/<id>.pid", so the host can kill the job's process group.
export PATH=/lab:/usr/sbin:/usr/bin:/host/bin HOME=/root
J=/host/jobs
cd /root
while :; do
  for f in "$J"/*.job; do
    [ -e "$f" ] || continue
    id=${f%.job}
    mv "$f" "$id.run" 2>/dev/null || continue
    # double fork: the job is re-parented to init, which reaps it
    ( (
      ( cd /root; exec setsid sh "$id.run" ) >"$id.out" 2>"$id.err" </dev/null
      echo $? >"$id.rc.tmp"
      mv "$id.rc.tmp" "$id.rc"
    ) & )
  done
  sleep 0.05
done
