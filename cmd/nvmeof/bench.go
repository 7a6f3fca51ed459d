package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/initiator/bench"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// parseSize parses 4096, 4k, 128K, 1m, 2G (powers of 1024).
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "ib"), "b")
	mult := int64(1)
	if s != "" {
		switch s[len(s)-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult != 1 {
			s = s[:len(s)-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("bench", stderr)
	var o fabricsOpts
	o.addFlags(fs, true)
	device := fs.StringP("device", "d", "", "a connected controller (nvme0): run in its daemon instead of connecting")
	fs.StringVar(&stateDirFlag, "state-dir", "", "runtime directory")
	var p bench.Params
	fs.Uint32Var(&p.NSID, "nsid", 0, "namespace (default: the first)")
	fs.StringVar(&p.RW, "rw", "randread", "pattern: read, write, randread, randwrite, rw, randrw")
	bsStr := fs.String("bs", "4k", "I/O size")
	fs.IntVar(&p.IODepth, "iodepth", 32, "I/Os in flight")
	fs.IntVar(&p.RWMixRead, "rwmixread", 50, "percentage of reads for rw and randrw")
	fs.DurationVar(&p.Runtime, "runtime", 10*time.Second, "duration")
	offStr := fs.String("offset", "0", "start of the region (bytes, k/m/g)")
	sizeStr := fs.String("size", "0", "length of the region (bytes, k/m/g; 0: to the end)")
	fs.BoolVar(&p.Verify, "verify", false, "write a per-block pattern and check every read (write-only loads are read back at the end)")
	fs.Uint64Var(&p.Seed, "seed", 0, "pattern and random seed (default: time)")
	fs.BoolVar(&p.PrefillOnly, "prefill-only", false, "write the verification pattern of --seed over the region in --bs pieces, then stop")
	fs.BoolVar(&p.Prefilled, "prefilled", false, "with --verify: the region already holds the pattern of --seed (skip writing it)")
	fs.BoolVar(&p.Force, "force", false, "run a load that writes (write, rw, randrw, randwrite, --verify, --prefill-only) even on a namespace in use on this host (mounted, on a loop device, its device file open): it destroys its data. Read-only loads need no --force")
	output := fs.StringP("output-format", "o", "normal", "output format: normal or json")
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	var err error
	bsv, err := parseSize(*bsStr)
	if err != nil {
		return fail(stderr, "bench", err)
	}
	p.BS = int(bsv)
	if p.Offset, err = parseSize(*offStr); err != nil {
		return fail(stderr, "bench", err)
	}
	if p.Size, err = parseSize(*sizeStr); err != nil {
		return fail(stderr, "bench", err)
	}
	progress := func(s string) {
		if *output != "json" {
			fmt.Fprintln(stdout, s)
		} else {
			fmt.Fprintln(stderr, s)
		}
	}
	var res *bench.Result
	if *device != "" {
		dev := strings.TrimPrefix(*device, "/dev/")
		if p.NSID == 0 {
			if st, err := readState(dev); err == nil && len(st.Namespaces) > 0 {
				p.NSID = st.Namespaces[0].NSID
			}
		}
		header(stdout, *output, p, dev)
		r, err := ctlCall(dev, ctlRequest{Op: "bench", Bench: &p}, p.Runtime+10*time.Minute, func(r ctlResponse) {
			if r.Progress != "" {
				progress(r.Progress)
			}
		})
		if err != nil {
			return fail(stderr, "bench", err)
		}
		if !r.OK || r.Result == nil {
			return fail(stderr, "bench", errors.New(r.Error))
		}
		res = r.Result
	} else {
		if o.nqn == "" {
			fmt.Fprintf(stderr, "bench: need -d DEVICE, or -a ADDR -n NQN to connect\n")
			return exitUsage
		}
		cfg, err := o.config(o.nqn, newLogger(o.verbose))
		if err != nil {
			return fail(stderr, "bench", err)
		}
		ctx := context.Background()
		sub := initiator.NewSubsystem(cfg.SubNQN, initiator.MultipathConfig{Logger: cfg.Logger})
		defer sub.Close(ctx)
		if _, err := sub.AddPath(ctx, cfg); err != nil {
			return fail(stderr, "bench", err)
		}
		ns := sub.Namespace(p.NSID)
		if p.NSID == 0 && len(sub.Namespaces()) > 0 {
			ns = sub.Namespaces()[0]
			p.NSID = ns.NSID()
		}
		if ns == nil {
			return fail(stderr, "bench", fmt.Errorf("no namespace %d", p.NSID))
		}
		if !p.Force && p.Writes() {
			ids := ns.Identifiers()
			n := nsState{NSID: ns.NSID()}
			if ids.HasNGUID {
				n.NGUID = fmt.Sprintf("%x", ids.NGUID)
			}
			if ids.HasUUID {
				n.UUID = nvmeof.FormatUUID(ids.UUID)
			}
			if err := attachedElsewhere("", []nsState{n}); err != nil {
				return fail(stderr, "bench", fmt.Errorf("%w; a load that writes would write under it (a read-only load, --rw read or randread, runs; --force to run anyway)", err))
			}
		}
		header(stdout, *output, p, cfg.SubNQN+" at "+cfg.Address)
		if res, err = bench.Run(ctx, ns, p, progress); err != nil {
			return fail(stderr, "bench", err)
		}
	}
	if *output == "json" {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		bench.Report(stdout, res)
	}
	if res.Errors > 0 || res.VerifyErrors > 0 {
		return exitFailure
	}
	return exitOK
}

func header(w io.Writer, format string, p bench.Params, target string) {
	if format == "json" {
		return
	}
	v := ""
	if p.Verify {
		v = ", verify"
	}
	fmt.Fprintf(w, "nvmeof bench: %s nsid %d: rw=%s bs=%d iodepth=%d runtime=%v%s\n", target, p.NSID, p.RW, p.BS, p.IODepth, p.Runtime, v)
}
