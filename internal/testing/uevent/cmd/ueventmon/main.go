//go:build linux

// Command ueventmon prints the kernel's uevents (NETLINK_KOBJECT_UEVENT,
// multicast group 1) of one subsystem, as `udevadm monitor --kernel
// --property --subsystem-match=S` does, for the lab guest, which has no
// udev: each event is its header line (ACTION@DEVPATH), its KEY=VALUE
// properties one a line, and an empty line. It prints "listening" once
// its socket is bound (events before that are not seen) and runs until
// killed. Test-only (test/interop: the Discovery Log Change notice).
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"syscall"
)

func main() {
	subsystem := flag.String("subsystem", "nvme", "print only events whose SUBSYSTEM is this (empty: all)")
	flag.Parse()
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM, syscall.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ueventmon: socket:", err)
		os.Exit(1)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK, Groups: 1}); err != nil {
		fmt.Fprintln(os.Stderr, "ueventmon: bind:", err)
		os.Exit(1)
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(w, "listening")
	w.Flush()
	buf := make([]byte, 64<<10)
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			if err == syscall.EINTR || err == syscall.ENOBUFS {
				continue
			}
			fmt.Fprintln(os.Stderr, "ueventmon: recv:", err)
			os.Exit(1)
		}
		// The kernel's events are "ACTION@DEVPATH\0KEY=VALUE\0..." (udev's
		// own rebroadcasts, "libudev" headed, are not the kernel's).
		fields := bytes.Split(bytes.TrimRight(buf[:n], "\x00"), []byte{0})
		if len(fields) == 0 || !bytes.Contains(fields[0], []byte("@")) {
			continue
		}
		if *subsystem != "" && !slicesContain(fields[1:], []byte("SUBSYSTEM="+*subsystem)) {
			continue
		}
		for _, f := range fields {
			w.Write(f)
			w.WriteByte('\n')
		}
		w.WriteByte('\n')
		w.Flush()
	}
}

func slicesContain(fields [][]byte, f []byte) bool {
	for _, x := range fields {
		if bytes.Equal(x, f) {
			return true
		}
	}
	return false
}
