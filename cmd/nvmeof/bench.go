package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nvmetd/nvmetd/initiator/bench"
	"github.com/nvmetd/nvmetd/initiator/connd"
)

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("bench", stderr)
	var o connd.FabricsOptions
	addFabricsFlags(fs, &o, true)
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
	bsv, err := bench.ParseSize(*bsStr)
	if err != nil {
		return fail(stderr, "bench", err)
	}
	p.BS = int(bsv)
	if p.Offset, err = bench.ParseSize(*offStr); err != nil {
		return fail(stderr, "bench", err)
	}
	if p.Size, err = bench.ParseSize(*sizeStr); err != nil {
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
			if st, err := store().Read(dev); err == nil && len(st.Namespaces) > 0 {
				p.NSID = st.Namespaces[0].NSID
			}
		}
		header(stdout, *output, p, dev)
		r, err := connd.Call(store(), dev, connd.Request{Op: "bench", Bench: &p}, p.Runtime+10*time.Minute, func(r connd.Response) {
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
		if o.NQN == "" {
			fmt.Fprintf(stderr, "bench: need -d DEVICE, or -a ADDR -n NQN to connect\n")
			return exitUsage
		}
		cfg, err := o.Config(o.NQN, newLogger(o.Verbose))
		if err != nil {
			return fail(stderr, "bench", err)
		}
		res, err = connd.Bench(context.Background(), store(), cfg, p, func(p bench.Params, target string) { header(stdout, *output, p, target) }, progress)
		if err != nil {
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
