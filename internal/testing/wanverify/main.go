// Command wanverify runs the versioned workload (internal/testing/verify)
// through an outage and sweeps the device at the end: the WAN lab's
// recovery check (test/wan), run inside the lab guest. Test support only.
//
// Against nvmetd with the Go host (initiator, iWARP):
//
//	wanverify -a 10.99.0.2:4420 -n NQN -duration 90s
//
// or on a block device of the Linux host (nvme connect ...):
//
//	wanverify -d /dev/nvme0n1 -duration 90s
//
// Every second it prints a progress line; at the end one JSON object
// (Result). It exits 1 if an I/O failed or the sweep found a lost
// acknowledged write.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/verify"
	"golang.org/x/sys/unix"
)

// Result is what wanverify prints at the end.
type Result struct {
	Device string `json:"device"`
	// Writes and Reads are the acknowledged I/Os; Errors the failed ones
	// (writes, reads, reads back without their write).
	Writes, Reads, Errors int64
	FirstErrors           []string `json:"first_errors,omitempty"`
	// LongestStall is the longest time with no write acknowledged, in
	// seconds; StallStart when it began (seconds from the start).
	LongestStall, StallStart float64
	// StartUnix, StallStartUnix and StallEndUnix are the same instants on
	// the wall clock (Unix seconds), so that a test can set them against
	// events it timed on the same machine's clock (a link going down).
	StartUnix, StallStartUnix, StallEndUnix float64
	// LastWriteUnix is when the last write was acknowledged (the wall
	// clock): after a link came back, the I/O resumed.
	LastWriteUnix float64
	// Resumed: with -resume-file, more than -workers writes were
	// acknowledged after the file appeared (the I/O resumed after the
	// link came back) before -max-duration.
	Resumed    bool
	Reconnects int
	// Sweep is the sweep's summary; SweepOK its verdict (every block its
	// last acknowledged write or a later one).
	Sweep   string
	SweepOK bool
}

func main() {
	addr := flag.String("a", "", "nvmetd's iWARP address host:port (the Go host connects)")
	nqn := flag.String("n", "", "subsystem NQN (with -a)")
	dev := flag.String("d", "", "a block device of the Linux host instead of -a")
	duration := flag.Duration("duration", 90*time.Second, "how long the workload runs")
	bs := flag.Int("bs", 4096, "versioned block size")
	workers := flag.Int("workers", 8, "concurrent writers")
	blocks := flag.Int64("blocks", 4096, "blocks written (the sweep reads the whole device)")
	reconnect := flag.Duration("reconnect-delay", 0, "reconnect_delay (default: the host's, 10 s)")
	ctrlLoss := flag.Duration("ctrl-loss-tmo", 0, "ctrl_loss_tmo (default: the host's, 600 s)")
	kato := flag.Duration("keep-alive-tmo", 0, "keep_alive_tmo (default: the host's, 5 s)")
	direct := flag.Bool("direct", true, "open -d with O_DIRECT (no page cache: a write is acknowledged by the controller); false: buffered with O_SYNC")
	resumeFile := flag.String("resume-file", "", "after -duration, go on until this file exists, holding a time (Unix seconds, the -clock clock: when a link came back), and more than -workers writes were acknowledged after it appeared (so at least one issued after it); bounded by -max-duration")
	maxDuration := flag.Duration("max-duration", 10*time.Minute, "with -resume-file: the longest run")
	clock := flag.Bool("clock", false, "print the wall clock in Unix seconds (the clock the result's *Unix fields use) and exit: busybox date has no %N")
	flag.Parse()
	if *clock {
		fmt.Printf("%.6f\n", unixSeconds(time.Now()))
		return
	}

	var d verify.Device
	var c *initiator.Controller
	var blk *os.File
	res := Result{}
	switch {
	case *dev != "" && *direct:
		// O_DIRECT: every write and read goes to the controller; the
		// sweep reads the device, not a cache.
		dd, err := verify.OpenDirect(*dev)
		if err != nil {
			fatal(err)
		}
		defer dd.Close()
		d = dd
		res.Device = *dev + " (O_DIRECT)"
	case *dev != "":
		// O_SYNC: a write returns once it is on the device (the
		// controller acknowledged it), not in the page cache; the sweep
		// drops the device's cache first (BLKFLSBUF) and reads the device.
		f, err := os.OpenFile(*dev, os.O_RDWR|os.O_SYNC, 0)
		if err != nil {
			fatal(err)
		}
		defer f.Close()
		blk = f
		if d, err = verify.File(f); err != nil {
			fatal(err)
		}
		res.Device = *dev
	case *addr != "" && *nqn != "":
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var err error
		c, err = initiator.Connect(ctx, initiator.Config{Address: *addr, SubNQN: *nqn, NrIOQueues: 2,
			ReconnectDelay: *reconnect, CtrlLossTimeout: *ctrlLoss, KeepAliveTimeout: *kato})
		cancel()
		if err != nil {
			fatal(err)
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = c.Close(ctx)
		}()
		ns := c.Namespace(1)
		if ns == nil {
			fatal(fmt.Errorf("%s: no namespace 1", *nqn))
		}
		d = ns
		res.Device = *nqn + " at " + *addr
	default:
		fatal(fmt.Errorf("need -d DEVICE or -a ADDR -n NQN"))
	}
	w, err := verify.Start(d, verify.Config{BlockSize: *bs, Blocks: *blocks, Workers: *workers, ReadBack: true})
	if err != nil {
		fatal(err)
	}
	start := time.Now()
	var last atomic.Int64
	lastChange := start
	var longest time.Duration
	var longestAt time.Time
	tick := time.NewTicker(100 * time.Millisecond)
	report := start
	for now := range tick.C {
		n := w.Stats().Writes
		if n != last.Load() {
			if gap := now.Sub(lastChange); gap > longest {
				longest, longestAt = gap, lastChange
			}
			last.Store(n)
			lastChange = now
		}
		if now.Sub(report) >= time.Second {
			report = now
			s := w.Stats()
			fmt.Fprintf(os.Stderr, "t=%5.1fs writes=%d reads=%d errors=%d\n", now.Sub(start).Seconds(), s.Writes, s.Reads, s.WriteErrors+s.ReadErrors+s.ReadBackErrors)
		}
		if el := now.Sub(start); el >= *duration {
			if *resumeFile == "" {
				break
			}
			if resumed(*resumeFile, int64(*workers), w.Stats().Writes) {
				res.Resumed = true
				break
			}
			if el >= *maxDuration {
				break
			}
		}
	}
	tick.Stop()
	w.Stop()
	if gap := time.Since(lastChange); gap > longest {
		longest, longestAt = gap, lastChange
	}
	s := w.Stats()
	res.Writes, res.Reads = s.Writes, s.Reads
	res.Errors = s.WriteErrors + s.ReadErrors + s.ReadBackErrors
	for _, e := range s.Errors {
		res.FirstErrors = append(res.FirstErrors, e.Error())
	}
	res.LongestStall = longest.Seconds()
	res.StallStart = longestAt.Sub(start).Seconds()
	res.StartUnix = unixSeconds(start)
	res.StallStartUnix = unixSeconds(longestAt)
	res.StallEndUnix = unixSeconds(longestAt.Add(longest))
	res.LastWriteUnix = unixSeconds(lastChange)
	if c != nil {
		res.Reconnects = c.Reconnects()
	}
	if blk != nil {
		if err := unix.IoctlSetInt(int(blk.Fd()), unix.BLKFLSBUF, 0); err != nil {
			fatal(fmt.Errorf("BLKFLSBUF %s: %w", *dev, err))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	r := w.Sweep(ctx, d)
	cancel()
	res.Sweep = r.String()
	res.SweepOK = r.Err() == nil
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	if res.Errors > 0 || !res.SweepOK {
		os.Exit(1)
	}
}

// resumeBase is the write count when the resume file was first seen
// (-1: not yet).
var resumeBase int64 = -1

// resumed reports whether the I/O resumed after the time the resume file
// holds (when the link came back): more than workers writes acknowledged
// since the file was first seen. At most workers writes (one per writer)
// were in flight then, so at least one of those acknowledged since was
// issued after the link came back: not only writes of before the outage
// that TCP delivered late, while the host may still be about to tear its
// association down and reconnect.
func resumed(file string, workers, writes int64) bool {
	if resumeBase < 0 {
		b, err := os.ReadFile(file)
		if err != nil {
			return false
		}
		var up float64
		if _, err := fmt.Sscanf(string(b), "%f", &up); err != nil {
			return false
		}
		resumeBase = writes
	}
	return writes > resumeBase+workers
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "wanverify:", err)
	os.Exit(2)
}
