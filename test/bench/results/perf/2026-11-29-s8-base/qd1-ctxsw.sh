#!/bin/bash
# run.sh BINDIR TAG: default-mode QD1 4 KiB randread for 5 s; ctx switches per I/O on each side
B=$1; TAG=$2; W=/tmp/qd1cnt/$TAG; mkdir -p $W; PORT=4499
cat > $W/y.yaml <<Y
daemon: {log_level: warn, log_format: console, control_socket: $W/s.sock}
ports: [{id: 1, address: 127.0.0.1, service_id: $PORT, subsystems: [nqn.2014-08.org.nvmexpress:cnt]}]
subsystems:
  - nqn: nqn.2014-08.org.nvmexpress:cnt
    allow_any_host: true
    namespaces: [{nsid: 1, backend: {kind: "null", size: 8GiB}}]
Y
taskset -c 0 env GOMAXPROCS=1 $B/nvmetd --config $W/y.yaml > $W/tgt.log 2>&1 & T=$!
for i in $(seq 100); do ss -ltn | grep -q ":$PORT " && break; sleep 0.1; done
csw() { local v=0 n=0; for f in /proc/$1/task/*/status; do a=$(awk '/^voluntary_ctxt/{print $2}' $f); b=$(awk '/^nonvoluntary_ctxt/{print $2}' $f); v=$((v+a)); n=$((n+b)); done; echo "$v $n"; }
read tv0 tn0 < <(csw $T)
taskset -c 1 env GOMAXPROCS=1 $B/nvmeof bench -t rdma -a 127.0.0.1 -s $PORT -n nqn.2014-08.org.nvmexpress:cnt -i 1 --nsid 1 --runtime 5s --busy-poll 0s --rw randread --bs 4096 --iodepth 1 -o json > $W/ini.json 2>$W/ini.err & I=$!
sleep 2; read iv0 in0 < <(csw $I); sleep 2; read iv1 in1 < <(csw $I)
wait $I
read tv1 tn1 < <(csw $T)
kill $T; wait $T 2>/dev/null
ios=$(python3 -c "import json;d=json.load(open('$W/ini.json'));print(d.get('ios') or d.get('IOs') or d)" 2>/dev/null | head -c 300)
echo "$TAG target csw vol $((tv1-tv0)) invol $((tn1-tn0)); initiator (2 s window) vol $((iv1-iv0)) invol $((in1-in0)); out: $ios"
