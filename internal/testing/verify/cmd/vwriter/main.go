// Command vwriter is the verified workload (internal/testing/verify) as a
// static program for the Linux host of the lab guest: the interop tests
// build it with lab.VM.BuildAndPut and run it on the multipath disk of an
// NVMe namespace (/dev/nvmeXnY, the kernel's native multipath head),
// opened with O_DIRECT.
//
//	vwriter write -dev /dev/nvme1n1 -state /root/vw.state -stop /root/vw.stop [-blocks 4096] [-workers 16] [-sweep]
//	vwriter sweep -dev /dev/nvme1n1 -state /root/vw.state
//	vwriter now
//
// write writes versioned blocks (each carrying run, block, sequence and
// writer, and a checksum) from -workers goroutines, one write of a block
// in flight at a time, recording per block the last acknowledged and the
// highest submitted sequence. A write that fails (EIO from the block
// layer: the kernel gave up on it) is a given-up write: counted and
// recorded as submitted, never as acknowledged, and the worker goes on, as
// a careful application does. It runs until the file -stop exists (or
// SIGTERM/SIGINT), then waits for its I/O in flight and saves its record
// to -state (written to a temporary file, fsynced, renamed). Every second
// it rewrites -progress (if set) with its counters. With -sweep it then
// reads the whole device and checks every block: the last acknowledged
// sequence or a later submitted one, never an older one, never torn or
// foreign. It prints a vblock.Summary as one JSON line on stdout (the
// stalls of the workload, Gaps longer than -gap, with it).
//
// sweep loads -state and sweeps the device, printing the Summary.
//
// now prints the clock (Unix nanoseconds; the guest's date has no %N), to
// place the Summary's stalls on the test's clock.
//
// The exit status is 0 whatever the sweep found (the test judges the
// Summary); 1 if the device or the state could not be opened or saved, 2
// on a usage error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/verify/vblock"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("vwriter: ")
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dev := fs.String("dev", "", "block device (opened with O_DIRECT)")
	statePath := fs.String("state", "", "the workload's record (written by write, read by sweep)")
	switch os.Args[1] {
	case "now":
		fmt.Println(time.Now().UnixNano())
	case "write":
		stop := fs.String("stop", "", "stop when this file exists")
		progress := fs.String("progress", "", "rewrite this file every second with the counters")
		blocks := fs.Int64("blocks", 4096, "blocks written, from block 0 (0: the whole device)")
		workers := fs.Int("workers", 16, "concurrent writers (the I/O depth)")
		bs := fs.Int("bs", 4096, "block size")
		readBack := fs.Bool("readback", true, "read each block back after its acknowledged write")
		sweep := fs.Bool("sweep", false, "sweep the whole device after the stop")
		gap := fs.Duration("gap", 200*time.Millisecond, "report stalls longer than this")
		_ = fs.Parse(os.Args[2:])
		if *dev == "" || *statePath == "" || *stop == "" {
			usage()
		}
		write(*dev, *statePath, *stop, *progress, vblock.Config{BlockSize: *bs, Blocks: *blocks, Workers: *workers, ReadBack: *readBack}, *sweep, *gap)
	case "sweep":
		_ = fs.Parse(os.Args[2:])
		if *dev == "" || *statePath == "" {
			usage()
		}
		f, err := os.Open(*statePath)
		if err != nil {
			log.Fatal(err)
		}
		w, err := vblock.LoadState(f)
		f.Close()
		if err != nil {
			log.Fatal(err)
		}
		d, err := vblock.OpenDirect(*dev)
		if err != nil {
			log.Fatal(err)
		}
		defer d.Close()
		emit(w.Sweep(context.Background(), d).Summary(nil))
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: vwriter write -dev DEV -state FILE -stop FILE [-progress FILE] [-blocks N] [-workers N] [-bs N] [-readback=false] [-sweep] [-gap D]\n       vwriter sweep -dev DEV -state FILE\n       vwriter now")
	os.Exit(2)
}

func write(dev, statePath, stopPath, progress string, cfg vblock.Config, sweep bool, gap time.Duration) {
	d, err := vblock.OpenDirect(dev)
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	w, err := vblock.Start(d, cfg)
	if err != nil {
		log.Fatal(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
wait:
	for {
		select {
		case s := <-sig:
			log.Printf("%v: stopping", s)
			break wait
		case <-tick.C:
		}
		if _, err := os.Stat(stopPath); err == nil {
			break wait
		}
		if progress != "" && time.Since(last) >= time.Second {
			last = time.Now()
			st := w.Stats()
			_ = writeFile(progress, fmt.Appendf(nil, "writes %d reads %d write_errors %d read_errors %d read_back_errors %d at %d\n",
				st.Writes, st.Reads, st.WriteErrors, st.ReadErrors, st.ReadBackErrors, last.UnixNano()), false)
		}
	}
	w.Stop() // waits for the I/O in flight: its outcome is in the record
	var b jsonBuf
	if err := w.SaveState(&b); err != nil {
		log.Fatal(err)
	}
	if err := writeFile(statePath, b, true); err != nil {
		log.Fatal(err)
	}
	gaps := w.Gaps(gap)
	if !sweep {
		emit((&vblock.Report{Workload: w.Stats()}).Summary(gaps))
		return
	}
	emit(w.Sweep(context.Background(), d).Summary(gaps))
}

type jsonBuf []byte

func (b *jsonBuf) Write(p []byte) (int, error) { *b = append(*b, p...); return len(p), nil }

// writeFile replaces path with b (a temporary file renamed over it;
// fsynced first if sync).
func writeFile(path string, b []byte, sync bool) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func emit(s vblock.Summary) {
	b, err := json.Marshal(s)
	if err != nil {
		log.Fatal(err)
	}
	os.Stdout.Write(append(b, '\n'))
}
