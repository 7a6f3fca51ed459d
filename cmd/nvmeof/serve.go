package main

import (
	"fmt"
	"io"
	"os"

	"github.com/nvmetd/nvmetd/initiator/connd"
)

// runServe is "nvmeof serve", the connection daemon connect starts
// (initiator/connd): its connect options on the command line, its
// secrets on standard input, its readiness pipe on fd 3.
func runServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("serve", stderr)
	dev := fs.String("instance", "", "controller instance (nvmeN)")
	cfgJSON := fs.String("config", "", "connect options (JSON)")
	fs.StringVar(&stateDirFlag, "state-dir", "", "runtime directory")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	var o connd.Options
	if err := o.UnmarshalJSON([]byte(*cfgJSON)); err != nil || *dev == "" {
		fmt.Fprintf(stderr, "serve: bad arguments: %v\n", err)
		return exitUsage
	}
	sec, ctrlSec, err := connd.ReadSecrets(os.Stdin)
	if err != nil {
		fmt.Fprintf(stderr, "serve: secrets on standard input: %v\n", err)
		return exitUsage
	}
	o.Fabrics.DHCHAPSecret, o.Fabrics.DHCHAPCtrlSecret = sec, ctrlSec
	var ready io.WriteCloser
	if f := os.NewFile(3, "ready"); f != nil {
		ready = f
	}
	if err := connd.Serve(store(), *dev, o, ready, stderr); err != nil {
		return exitFailure
	}
	return exitOK
}
