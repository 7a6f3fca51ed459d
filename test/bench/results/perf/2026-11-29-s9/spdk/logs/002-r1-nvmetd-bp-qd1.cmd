env GOMAXPROCS=1 bin/nvmeof bench -t rdma -a 127.0.0.1 -s 4520 -n nqn.2024-01.io.nvmetd:bench -i 1 --nsid 1 --runtime 3s --busy-poll 50us --rw randread --bs 4096 --iodepth 1 -o json 
