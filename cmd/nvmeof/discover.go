package main

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/initiator/connd"
	"github.com/nvmetd/nvmetd/initiator/nvmecli"
	"github.com/nvmetd/nvmetd/nvmeof"
)

func runDiscover(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("discover", stderr)
	var o connd.FabricsOptions
	addFabricsFlags(fs, &o, false)
	output := fs.StringP("output-format", "o", "normal", "output format: normal or json")
	follow := fs.Bool("referrals", true, "follow referrals to other discovery controllers")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	if *output != "normal" && *output != "json" {
		fmt.Fprintf(stderr, "discover: invalid output format %q\n", *output)
		return exitUsage
	}
	cfg, err := o.Config(nvmeof.DiscoveryNQN, newLogger(o.Verbose))
	if err != nil {
		return fail(stderr, "discover", err)
	}
	depth := 0
	if *follow {
		depth = 4
	}
	res, err := initiator.DiscoverReferrals(context.Background(), cfg, depth)
	if err != nil {
		return fail(stderr, "failed to add controller, error", err)
	}
	for _, r := range res {
		if r.Err != nil {
			fmt.Fprintf(stderr, "discover: referral %s: %v\n", r.Address, r.Err)
			continue
		}
		if *output == "json" {
			nvmecli.WriteDiscoveryJSON(stdout, r.Log)
		} else {
			nvmecli.WriteDiscovery(stdout, r.Log)
		}
	}
	return exitOK
}

func runConnectAll(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("connect-all", stderr)
	var o connd.Options
	var output string
	addConnectFlags(fs, &o, &output)
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	cfg, err := o.Fabrics.Config(nvmeof.DiscoveryNQN, newLogger(o.Fabrics.Verbose))
	if err != nil {
		return fail(stderr, "connect-all", err)
	}
	res, err := initiator.DiscoverReferrals(context.Background(), cfg, 4)
	if err != nil {
		return fail(stderr, "failed to add controller, error", err)
	}
	failed := 0
	for _, r := range res {
		if r.Err != nil {
			fmt.Fprintf(stderr, "connect-all: referral %s: %v\n", r.Address, r.Err)
			continue
		}
		for _, e := range r.Log.Entries {
			eo, ok := o.ForEntry(e)
			if !ok {
				continue
			}
			addr, _ := eo.Fabrics.Address()
			if dev := store().ConnectedTo(eo.Fabrics.NQN, addr); dev != "" {
				fmt.Fprintf(stderr, "already connected to %s at %s (%s)\n", e.SubNQN, net.JoinHostPort(e.TrAddr, e.TrSvcID), dev)
				continue
			}
			st, err := connd.Start(store(), &eo)
			if err != nil {
				fmt.Fprintf(stderr, "connect-all: %s at %s: %v\n", e.SubNQN, addr, err)
				failed++
				continue
			}
			printConnected(stdout, st, output)
		}
	}
	if failed > 0 {
		return exitFailure
	}
	return exitOK
}
