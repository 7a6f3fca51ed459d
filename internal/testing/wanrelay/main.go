// Command wanrelay runs the re-segmenting relay (internal/testing/relay)
// as a process: the WAN lab puts it inside the lab guest between the
// Linux host's siw and nvmetd (test/wan, test/interop's WAN subset), where
// a Go test cannot run the relay in-process. Test support only.
//
//	wanrelay -listen 10.99.0.2:4423 -target 10.99.0.2:4420
//
// It prints "listening ADDR seed N" once it accepts, then runs until
// SIGTERM or SIGINT, and prints its counts (relay.Stats) as one JSON
// object on the way out (and every second into the file -stats names).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/relay"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	target := flag.String("target", "", "address each connection is relayed to (host:port)")
	minWrite := flag.Int("min-write", 1, "smallest write (segment) sent")
	maxWrite := flag.Int("max-write", 3000, "largest write (segment) sent")
	coalesce := flag.Duration("coalesce", 2*time.Millisecond, "how long to keep reading to coalesce")
	maxDelay := flag.Duration("max-delay", 200*time.Microsecond, "largest random pause before a write")
	seed := flag.Uint64("seed", 0, "seed (0: random; printed)")
	stats := flag.String("stats", "", "file the counts (JSON) are written to every second")
	flag.Parse()
	r, err := relay.Start(relay.Config{Target: *target, Listen: *listen, MinWrite: *minWrite, MaxWrite: *maxWrite,
		Coalesce: *coalesce, MaxDelay: *maxDelay, Seed: *seed})
	if err != nil {
		fmt.Fprintln(os.Stderr, "wanrelay:", err)
		os.Exit(2)
	}
	fmt.Printf("listening %s seed %d\n", r.Addr(), r.Seed())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	write := func() {
		b, _ := json.Marshal(r.Stats())
		if *stats != "" {
			_ = os.WriteFile(*stats+".tmp", b, 0o644)
			_ = os.Rename(*stats+".tmp", *stats)
		}
	}
	for {
		select {
		case <-tick.C:
			write()
			continue
		case <-sig:
		}
		break
	}
	_ = r.Close()
	write()
	b, _ := json.Marshal(r.Stats())
	fmt.Println(string(b))
}
