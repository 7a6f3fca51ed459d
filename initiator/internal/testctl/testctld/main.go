// Command testctld runs the initiator's test controller (package testctl)
// as a process, for tests that need a target in another network namespace
// or a target to kill and restart: one NVM subsystem and the discovery
// subsystem on one port.
//
//	testctld -listen 10.77.2.2:4420 -nqn nqn.2024-01.io.nvmetd.test:sub1 -size 256M [-file /tmp/ns.img]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/initiator/internal/testctl"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:4420", "listen address")
	nqn := flag.String("nqn", "nqn.2024-01.io.nvmetd.test:sub1", "subsystem NQN")
	size := flag.String("size", "256M", "namespace size")
	file := flag.String("file", "", "keep the namespace in this file (else in memory)")
	bs := flag.Int("block-size", 512, "logical block size")
	crc := flag.String("crc", "off", "MPA CRC policy")
	verbose := flag.Bool("v", false, "log")
	flag.Parse()
	n, err := parseSize(*size)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	pol, err := rdma.ParseCRCPolicy(*crc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := zap.NewNop()
	if *verbose {
		log, _ = zap.NewDevelopment()
	}
	cfg := testctl.Config{Addr: *listen, SubNQN: *nqn, Logger: log,
		Namespaces: []testctl.NamespaceConfig{{NSID: 1, Size: n, BlockSize: *bs, Path: *file}}}
	cfg.Transport.Transport.CRC = pol
	t, err := testctl.Start(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", t.Addr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	t.Close()
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}
