package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// runGenHostNQN prints a new host NQN of the UUID form, from this machine's
// stable UUID when it has one (nvme gen-hostnqn).
func runGenHostNQN(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("gen-hostnqn", stderr)
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	id, err := initiator.GenerateHostIdentity(initiator.DefaultHostPaths)
	if err != nil {
		return fail(stderr, "gen-hostnqn", err)
	}
	fmt.Fprintln(stdout, id.NQN)
	return exitOK
}

// runShowHostNQN prints the host NQN and host ID connect and discover use
// (nvme show-hostnqn, plus the ID and where they come from).
func runShowHostNQN(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("show-hostnqn", stderr)
	output := fs.StringP("output-format", "o", "normal", "output format: normal or json")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	id, err := initiator.HostIdentity()
	if err != nil {
		return fail(stderr, "show-hostnqn", err)
	}
	if *output == "json" {
		b, _ := json.MarshalIndent(map[string]string{"hostnqn": id.NQN, "hostid": nvmeof.FormatUUID(id.ID), "source": id.Source}, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	fmt.Fprintln(stdout, id.NQN)
	fmt.Fprintf(stdout, "hostid: %s (%s)\n", nvmeof.FormatUUID(id.ID), id.Source)
	return exitOK
}
