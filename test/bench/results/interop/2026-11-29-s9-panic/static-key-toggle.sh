#!/bin/bash
# Toggle a static key (schedstats) in a 6.12 TCG guest while both vCPUs run: does runtime code patching oops under this QEMU?
cd /work/wt/s9-panic
R=/tmp/s9-static-vm; rm -rf $R; mkdir -p $R
K=${1:-6.12}; N=${2:-3000}
NVMETD_LAB_KERNEL=$K test/lab/vm.sh -r $R start
test/lab/vm.sh -r $R exec -t 900 "cat /proc/sys/kernel/sched_schedstats; (while :; do /bin/true; done) & b1=\$!; (while :; do /bin/true; done) & b2=\$!; for i in \$(seq 1 $N); do echo 1 > /proc/sys/kernel/sched_schedstats; echo 0 > /proc/sys/kernel/sched_schedstats; done; kill \$b1 \$b2; echo toggled $N" 
echo "exec rc=$?"
cp $R/console.log /tmp/s9-panic-runs/static-$K-${TAG:-x}.console.log
grep -n -E "Oops|BUG:|int3|panic" $R/console.log | head
test/lab/vm.sh -r $R stop
