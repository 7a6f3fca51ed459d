// Command countreport prints the per-I/O counts of one load of
// test/bench/loopback.sh COUNT=1: system calls by kind, context switches
// and wake-ups (perf stat on each process), goroutine schedulings, lock
// acquisitions and allocations (internal/perfcount in a -tags perfcount
// build), for the target and the host side by side.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// event is one perf stat counter: the label the report prints and the
// perf event with its filter, in the order loopback.sh passes them.
type event struct{ label, spec string }

// Events are the perf stat counters, in order; loopback.sh gets them from
// `countreport -events`.
var events = []event{
	{"syscalls", "raw_syscalls:sys_enter"},
	{"readv", "syscalls:sys_enter_readv"},
	{"readv EAGAIN", "syscalls:sys_exit_readv --filter ret==-11"},
	{"writev", "syscalls:sys_enter_writev"},
	{"read", "syscalls:sys_enter_read"},
	{"read EAGAIN", "syscalls:sys_exit_read --filter ret==-11"},
	{"write", "syscalls:sys_enter_write"},
	{"pread64", "syscalls:sys_enter_pread64"},
	{"pwrite64", "syscalls:sys_enter_pwrite64"},
	{"preadv2", "syscalls:sys_enter_preadv2"},
	{"preadv2 EAGAIN", "syscalls:sys_exit_preadv2 --filter ret==-11"},
	{"pwritev2", "syscalls:sys_enter_pwritev2"},
	{"epoll_pwait", "syscalls:sys_enter_epoll_pwait"},
	{"futex", "syscalls:sys_enter_futex"},
	{"nanosleep", "syscalls:sys_enter_nanosleep"},
	{"sched_yield", "syscalls:sys_enter_sched_yield"},
	{"tgkill", "syscalls:sys_enter_tgkill"},
	{"context switches", "context-switches"},
	{"  voluntary (slept)", "sched:sched_switch --filter prev_state&255"},
	{"wake-ups issued", "sched:sched_wakeup"},
	{"cpu migrations", "cpu-migrations"},
}

type report struct {
	What           string            `json:"what"`
	Seconds        float64           `json:"seconds"`
	IOs            uint64            `json:"ios"`
	Locks          uint64            `json:"locks"`
	RLocks         uint64            `json:"rlocks"`
	Sites          map[string]uint64 `json:"sites"`
	Schedules      uint64            `json:"schedules"`
	GoroutinesMade uint64            `json:"goroutines_created"`
	Goroutines     uint64            `json:"goroutines"`
	Threads        uint64            `json:"threads"`
	Allocs         uint64            `json:"allocs"`
	GCs            uint64            `json:"gcs"`
}

func main() {
	listEvents := flag.Bool("events", false, "print the perf stat arguments and exit")
	ios := flag.Float64("ios", 0, "I/Os the load carried")
	tPerf := flag.String("target-perf", "", "perf stat -x, output of the target")
	hPerf := flag.String("host-perf", "", "perf stat -x, output of the host")
	tCount := flag.String("target-count", "", "perfcount JSON lines of the target (the last is used)")
	hCount := flag.String("host-count", "", "perfcount JSON lines of the host (the last is used)")
	tCtx := flag.String("target-ctx", "", "voluntary and involuntary context switches of the target from /proc (\"v n\")")
	minSite := flag.Float64("min-site", 0.05, "lock sites below this many per I/O are summed as \"other\"")
	flag.Parse()
	if *listEvents {
		var args []string
		for _, e := range events {
			spec, filter, _ := strings.Cut(e.spec, " --filter ")
			args = append(args, "-e", spec)
			if filter != "" {
				args = append(args, "--filter", filter)
			}
		}
		fmt.Println(strings.Join(args, " "))
		return
	}
	if *ios <= 0 {
		fmt.Fprintln(os.Stderr, "countreport: -ios is required")
		os.Exit(2)
	}
	tp, hp := readPerf(*tPerf), readPerf(*hPerf)
	tc, hc := readCount(*tCount), readCount(*hCount)
	row := func(label string, t, h float64, ok bool) {
		if !ok {
			return
		}
		fmt.Printf("  %-26s %9.2f %9.2f\n", label, t/(*ios), h/(*ios))
	}
	fmt.Printf("  %-26s %9s %9s   (per I/O, %.0f I/Os)\n", "", "target", "host", *ios)
	for i, e := range events {
		t, tok := at(tp, i)
		h, hok := at(hp, i)
		if (t == 0 && h == 0) && i > 0 && e.label != "readv EAGAIN" {
			continue
		}
		row(e.label, t, h, tok || hok)
	}
	if *tCtx != "" {
		var v, n float64
		fmt.Sscan(*tCtx, &v, &n)
		fmt.Printf("  %-26s %9.2f %9s\n", "/proc ctx switches vol", v/(*ios), "")
		fmt.Printf("  %-26s %9.2f %9s\n", "/proc ctx switches invol", n/(*ios), "")
	}
	if tc == nil && hc == nil {
		return
	}
	if tc == nil {
		tc = &report{}
	}
	if hc == nil {
		hc = &report{}
	}
	f := func(v uint64) float64 { return float64(v) }
	row("goroutine schedulings", f(tc.Schedules), f(hc.Schedules), true)
	row("goroutines created", f(tc.GoroutinesMade), f(hc.GoroutinesMade), true)
	row("heap allocations", f(tc.Allocs), f(hc.Allocs), true)
	row("lock acquisitions", f(tc.Locks+tc.RLocks), f(hc.Locks+hc.RLocks), true)
	fmt.Printf("  %-26s %9d %9d   (live at the end)\n", "goroutines", tc.Goroutines, hc.Goroutines)
	fmt.Printf("  %-26s %9d %9d   (live at the end)\n", "threads", tc.Threads, hc.Threads)
	for _, side := range []struct {
		name string
		r    *report
	}{{"target", tc}, {"host", hc}} {
		if len(side.r.Sites) == 0 {
			continue
		}
		type kv struct {
			k string
			v float64
		}
		var l []kv
		var other float64
		for k, v := range side.r.Sites {
			per := float64(v) / *ios
			if per < *minSite {
				other += per
				continue
			}
			l = append(l, kv{k, per})
		}
		sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v || l[i].v == l[j].v && l[i].k < l[j].k })
		fmt.Printf("  lock acquisitions by site, %s (sampled 1/64):\n", side.name)
		for _, e := range l {
			fmt.Printf("    %6.2f  %s\n", e.v, e.k)
		}
		if other > 0 {
			fmt.Printf("    %6.2f  (other sites)\n", other)
		}
	}
}

// readPerf reads perf stat -x, output: one counter per line, in order.
func readPerf(path string) []float64 {
	if path == "" {
		return nil
	}
	fh, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "countreport:", err)
		return nil
	}
	defer fh.Close()
	var v []float64
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) < 3 {
			continue
		}
		n, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			n = -1 // <not counted> / <not supported>
		}
		v = append(v, n)
	}
	return v
}

func at(v []float64, i int) (float64, bool) {
	if i < len(v) && v[i] >= 0 {
		return v[i], true
	}
	return 0, false
}

func readCount(path string) *report {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var r report
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		fmt.Fprintln(os.Stderr, "countreport:", err)
		return nil
	}
	return &r
}
