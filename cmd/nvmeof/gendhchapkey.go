package main

import (
	"crypto/rand"
	"fmt"
	"io"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/nvmeof/auth"
)

// runGenDHCHAPKey prints a DH-HMAC-CHAP key usable with nvmeof connect
// --dhchap-secret, nvme-cli and the kernel, with nvme gen-dhchap-key's flags
// and output (auth.GenerateKey).
func runGenDHCHAPKey(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("gen-dhchap-key", stderr)
	var opt auth.KeyOptions
	fs.StringVarP(&opt.Secret, "secret", "s", "", "Optional secret (in hexadecimal characters) to be used to initialize the host key.")
	fs.IntVarP(&opt.KeyLength, "key-length", "l", 0, "Length of the resulting key (32, 48, or 64 bytes).")
	fs.StringVarP(&opt.NQN, "nqn", "n", "", "Host NQN to use for key transformation (default: the host NQN in use, see show-hostnqn).")
	fs.IntVarP(&opt.HMAC, "hmac", "m", 0, "HMAC function to use for key transformation (0 = none, 1 = SHA-256, 2 = SHA-384, 3 = SHA-512).")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	if opt.NQN == "" {
		id, err := initiator.HostIdentity()
		if err != nil {
			return fail(stderr, "gen-dhchap-key", fmt.Errorf("Could not read host NQN: %w", err))
		}
		opt.NQN = id.NQN
	}
	key, err := auth.GenerateKey(opt, rand.Reader)
	if err != nil {
		return fail(stderr, "gen-dhchap-key", err)
	}
	fmt.Fprintln(stdout, key)
	return exitOK
}
