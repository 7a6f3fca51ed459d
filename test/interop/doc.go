// Package interop holds the interop tests of nvmetd against the Linux kernel
// (siw, nvme-rdma, nvmet-rdma, rping, nvme-cli) in the project's lab VM: see
// test/lab/README.md and the lab package. Only this directory's tests boot a
// VM; run them with:
//
//	go test ./test/interop/... -v -count=1 -timeout 20m
package interop
