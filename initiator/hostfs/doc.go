// Package hostfs is what the host tool does to this machine's block
// devices and filesystems for a connected namespace: attach its device
// file to a loop device (losetup), probe it for an existing filesystem or
// partition table, make and mount a filesystem, unmount and detach, and
// find what keeps a filesystem busy (the processes that use it, by device
// number, and the mounts beneath it) so that a refused disconnect can say
// why. Each system tool runs bounded (a teardown never waits forever on
// one).
package hostfs
