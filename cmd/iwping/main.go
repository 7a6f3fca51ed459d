// Command iwping is an rping-compatible verbs check over nvmetd's
// user-space iWARP engine. It speaks librdmacm rping's exchange (buffer
// advertisement by Send, RDMA Read, RDMA Write, validation) on the wire, so
// it interoperates with rping on Linux soft-iWARP (siw) both ways:
//
//	iwping -s -a 0.0.0.0 -p 7999 -S 100 -V          # server, like rping -s
//	iwping -c -a 10.0.2.15 -p 7999 -C 10 -S 100 -vV # client, like rping -c
//
// Flags follow rping (-s -c -a -I -p -C -S -v -V -d -P; -q is accepted and
// ignored) with iWARP options of our own (--crc, --mpa-rev, --p2p, --fpdu).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nvmetd/nvmetd/internal/version"
	"github.com/nvmetd/nvmetd/iwarp"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := pflag.NewFlagSet("iwping", pflag.ContinueOnError)
	fs.SortFlags = false
	var o options
	var client, debug, selfQP bool
	var crc string
	var rev uint8
	var fpdu int
	fs.BoolVarP(&o.server, "server", "s", false, "server side")
	fs.BoolVarP(&client, "client", "c", false, "client side")
	fs.StringVarP(&o.addr, "addr", "a", "", "address (server: to bind; client: to connect to)")
	fs.StringVarP(&o.source, "source", "I", "", "source address to bind to for the client (accepted for rping compatibility)")
	fs.IntVarP(&o.port, "port", "p", 7174, "port")
	fs.IntVarP(&o.count, "count", "C", 0, "ping count (0: until interrupted)")
	fs.IntVarP(&o.size, "size", "S", 64, fmt.Sprintf("ping data size (rping: %d to %d; iwping with iwping: up to %d)", rpingMinSize, rpingMaxSize, ourMaxSize))
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "display ping data to stdout")
	fs.BoolVarP(&o.validate, "validate", "V", false, "validate ping data")
	fs.BoolVarP(&debug, "debug", "d", false, "debug logging to stderr")
	fs.BoolVarP(&o.persistent, "persistent", "P", false, "persistent server mode allowing multiple connections")
	fs.BoolVarP(&selfQP, "self-qp", "q", false, "ignored (rping: use a self-created QP)")
	fs.StringVar(&crc, "crc", "off", "MPA CRC: off (use it if the peer asks), offered, required")
	fs.Uint8Var(&rev, "mpa-rev", 2, "MPA revision the client sends (1 or 2)")
	fs.BoolVar(&o.cfg.PeerToPeer, "p2p", false, "client requests RFC 6581 peer-to-peer mode (RTR)")
	fs.IntVar(&fpdu, "fpdu", 0, "largest FPDU to send in bytes (0: the TCP MSS, as siw)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage:\n  iwping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n  iwping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == pflag.ErrHelp {
			return 0
		}
		fmt.Fprintln(os.Stderr, err)
		fs.Usage()
		return 22 // EINVAL, as rping
	}
	if *showVersion {
		fmt.Println(version.Line("iwping"))
		return 0
	}
	if o.server == client {
		fs.Usage()
		return 22
	}
	if o.size < rpingMinSize || o.size > ourMaxSize {
		fmt.Fprintf(os.Stderr, "Invalid size %d (valid range is %d to %d)\n", o.size, rpingMinSize, ourMaxSize)
		return 22
	}
	if o.count < 0 {
		fmt.Fprintf(os.Stderr, "Invalid count %d\n", o.count)
		return 22
	}
	if client && o.addr == "" {
		fmt.Fprintln(os.Stderr, "-a addr is required for the client")
		return 22
	}
	var err error
	if o.cfg.CRC, err = iwarp.ParseCRCPolicy(crc); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 22
	}
	o.cfg.MPARevision, o.cfg.MaxFPDU = rev, fpdu
	if err := o.cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 22
	}
	lvl := zapcore.WarnLevel
	if debug {
		lvl = zapcore.DebugLevel
	}
	zc := zap.NewDevelopmentConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	o.log, _ = zc.Build()
	defer o.log.Sync()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.server {
		err = runServer(ctx, &o, os.Stdout, nil)
	} else {
		err = runClient(ctx, &o, os.Stdout)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "iwping %s failed: %v\n", map[bool]string{true: "server", false: "client"}[o.server], err)
		return 1
	}
	return 0
}
