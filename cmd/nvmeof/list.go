package main

import (
	"io"

	"github.com/nvmetd/nvmetd/initiator/connd"
	"github.com/nvmetd/nvmetd/initiator/hoststate"
	"github.com/nvmetd/nvmetd/initiator/nvmecli"
)

func runList(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("list", stderr)
	output := fs.StringP("output-format", "o", "normal", "output format: normal or json (nvme list's \"Devices\", and \"controllers\")")
	verbose := fs.BoolP("verbose", "v", false, "with -o json: \"Devices\" in nvme list -v's form (hosts, subsystems, namespaces, paths)")
	fs.StringVar(&stateDirFlag, "state-dir", "", "runtime directory")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	var all []*hoststate.Controller
	for _, dev := range store().Instances() {
		st := connd.LiveState(store(), dev)
		if st != nil {
			all = append(all, st)
		}
	}
	if *output == "json" {
		nvmecli.WriteListJSON(stdout, all, *verbose)
		return exitOK
	}
	nvmecli.WriteList(stdout, all)
	return exitOK
}
