package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/nvmetd/nvmetd/initiator/autoconnect"
)

func runAutoconnect(args []string, stdout, stderr io.Writer) int {
	fset := newFlagSet("autoconnect", stderr)
	discoveryConf := fset.String("discovery-conf", autoconnect.DefaultDiscoveryConf, "nvme-cli discovery configuration (one connect-all per line)")
	configJSON := fset.StringP("config", "J", autoconnect.DefaultConfigJSON, "libnvme JSON configuration (hosts, subsystems, ports)")
	dryRun := fset.Bool("dry-run", false, "print the commands instead of running them")
	fset.StringVar(&stateDirFlag, "state-dir", "", "runtime directory (default /run/nvmeof)")
	if code, ok := parse(fset, args, stderr); !ok {
		return code
	}
	entries, notes, err := autoconnect.Load(*discoveryConf, *configJSON)
	if err != nil {
		return fail(stderr, "autoconnect", err)
	}
	for _, n := range notes {
		fmt.Fprintf(stderr, "autoconnect: %s\n", n)
	}
	failed := 0
	for _, e := range entries {
		cmd := "connect"
		if e.Discovery {
			cmd = "connect-all"
		}
		if *dryRun {
			fmt.Fprintf(stdout, "nvmeof %s %s\n", cmd, strings.Join(append(append([]string{}, e.Args...), e.Secrets.Redacted()...), " "))
			continue
		}
		run := runConnect
		if e.Discovery {
			run = runConnectAll
		}
		var errBuf strings.Builder
		code := run(append(append([]string{}, e.Args...), e.Secrets.Args()...), stdout, &errBuf)
		msg := errBuf.String()
		if code != exitOK && !strings.Contains(msg, "already connected") {
			failed++
			fmt.Fprintf(stderr, "autoconnect: %s: nvmeof %s failed:\n%s", e.Source, cmd, msg)
		} else if msg != "" {
			fmt.Fprint(stderr, msg)
		}
	}
	if failed > 0 {
		return exitFailure
	}
	return exitOK
}
