/work/spdk/build/bin/spdk_nvme_perf -c 0x2 -q 16 -o 131072 -w write -t 3 -L -r trtype:TCP\ adrfam:IPv4\ traddr:127.0.0.1\ trsvcid:4420\ subnqn:nqn.2016-06.io.spdk:cnode1 
