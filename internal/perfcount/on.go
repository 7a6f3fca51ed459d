//go:build perfcount

package perfcount

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Enabled reports whether the package counts (the perfcount build tag).
const Enabled = true

// sampleMask: one acquisition in sampleMask+1 records its call site.
const sampleMask = 63

var (
	locks  atomic.Uint64 // Lock and successful TryLock
	rlocks atomic.Uint64 // RLock
	sites  siteTable
)

// siteTable counts sampled acquisitions by call site in a fixed
// open-addressing table: lock-free, and it never allocates (the report
// resolves names). A site is the return address into the function that
// locked, with the one above it kept to see through sync.Cond.Wait.
type siteTable struct {
	slot [4096]struct {
		pc, up atomic.Uintptr
		n      atomic.Uint64
	}
}

func (t *siteTable) add(pc, up uintptr) {
	h := (uint64(pc) * 0x9E3779B97F4A7C15) >> 52
	for i := uint64(0); i < uint64(len(t.slot)); i++ {
		s := &t.slot[(h+i)%uint64(len(t.slot))]
		cur := s.pc.Load()
		if cur == 0 {
			if s.pc.CompareAndSwap(0, pc) {
				s.up.Store(up)
				cur = pc
			} else {
				cur = s.pc.Load()
			}
		}
		if cur == pc {
			s.n.Add(1)
			return
		}
	}
}

// sample records the call site of one acquisition in sampleMask+1.
func sample() {
	if rand.Uint32()&sampleMask != 0 {
		return
	}
	var pcs [2]uintptr
	if runtime.Callers(3, pcs[:]) > 0 {
		sites.add(pcs[0], pcs[1])
	}
}

// siteName names a call site: the function that locked (a sync.Cond's
// re-lock counts for the function that waited).
func siteName(pc, up uintptr) string {
	name := func(pc uintptr) string {
		f, _ := runtime.CallersFrames([]uintptr{pc}).Next()
		return strings.TrimPrefix(f.Function, "github.com/nvmetd/nvmetd/")
	}
	n := name(pc)
	if strings.HasPrefix(n, "sync.") && up != 0 {
		n = name(up)
	}
	return n
}

// Mutex is a sync.Mutex that counts its acquisitions.
type Mutex struct{ m sync.Mutex }

// Lock locks m.
func (m *Mutex) Lock() {
	locks.Add(1)
	sample()
	m.m.Lock()
}

// Unlock unlocks m.
func (m *Mutex) Unlock() { m.m.Unlock() }

// TryLock tries to lock m.
func (m *Mutex) TryLock() bool {
	if !m.m.TryLock() {
		return false
	}
	locks.Add(1)
	sample()
	return true
}

// RWMutex is a sync.RWMutex that counts its acquisitions.
type RWMutex struct{ m sync.RWMutex }

// Lock locks m for writing.
func (m *RWMutex) Lock() {
	locks.Add(1)
	sample()
	m.m.Lock()
}

// Unlock unlocks m for writing.
func (m *RWMutex) Unlock() { m.m.Unlock() }

// RLock locks m for reading.
func (m *RWMutex) RLock() {
	rlocks.Add(1)
	sample()
	m.m.RLock()
}

// RUnlock unlocks m for reading.
func (m *RWMutex) RUnlock() { m.m.RUnlock() }

// snapshot is the state of the counters at one moment.
type snapshot struct {
	at              time.Time
	locks, rlocks   uint64
	sites           map[[2]uintptr]uint64
	schedSamples    uint64 // /sched/latencies:seconds count (1 in 8 transitions)
	goroutinesMade  uint64
	goroutines      uint64
	threads         uint64
	allocs, gcs     uint64
	mutexWaitSecond float64
}

var metricNames = []string{
	"/sched/latencies:seconds",
	"/sched/goroutines-created:goroutines",
	"/sched/goroutines:goroutines",
	"/sched/threads/total:threads",
	"/gc/heap/allocs:objects",
	"/gc/cycles/total:gc-cycles",
	"/sync/mutex/wait/total:seconds",
}

func take() snapshot {
	s := snapshot{at: time.Now(), locks: locks.Load(), rlocks: rlocks.Load(), sites: map[[2]uintptr]uint64{}}
	for i := range sites.slot {
		sl := &sites.slot[i]
		if pc := sl.pc.Load(); pc != 0 {
			s.sites[[2]uintptr{pc, sl.up.Load()}] = sl.n.Load()
		}
	}
	ms := make([]metrics.Sample, len(metricNames))
	for i, n := range metricNames {
		ms[i].Name = n
	}
	metrics.Read(ms)
	for _, b := range ms[0].Value.Float64Histogram().Counts {
		s.schedSamples += b
	}
	s.goroutinesMade = ms[1].Value.Uint64()
	s.goroutines = ms[2].Value.Uint64()
	s.threads = ms[3].Value.Uint64()
	s.allocs = ms[4].Value.Uint64()
	s.gcs = ms[5].Value.Uint64()
	s.mutexWaitSecond = ms[6].Value.Float64()
	return s
}

// Report is one JSON line: the counts between two snapshots.
type Report struct {
	What    string  `json:"what"`
	Seconds float64 `json:"seconds"`
	IOs     uint64  `json:"ios,omitempty"`
	Locks   uint64  `json:"locks"`
	RLocks  uint64  `json:"rlocks"`
	// Sites estimates acquisitions per call site (sampled, scaled up).
	Sites map[string]uint64 `json:"sites"`
	// Schedules estimates goroutine schedulings (8 × sampled).
	Schedules      uint64  `json:"schedules"`
	GoroutinesMade uint64  `json:"goroutines_created"`
	Goroutines     uint64  `json:"goroutines"` // live at the end
	Threads        uint64  `json:"threads"`    // live at the end
	Allocs         uint64  `json:"allocs"`
	GCs            uint64  `json:"gcs"`
	MutexWait      float64 `json:"mutex_wait_s"`
}

func diff(what string, a, b snapshot, ios uint64) Report {
	r := Report{What: what, Seconds: b.at.Sub(a.at).Seconds(), IOs: ios,
		Locks: b.locks - a.locks, RLocks: b.rlocks - a.rlocks, Sites: map[string]uint64{},
		Schedules: 8 * (b.schedSamples - a.schedSamples), GoroutinesMade: b.goroutinesMade - a.goroutinesMade,
		Goroutines: b.goroutines, Threads: b.threads, Allocs: b.allocs - a.allocs, GCs: b.gcs - a.gcs,
		MutexWait: b.mutexWaitSecond - a.mutexWaitSecond}
	for k, n := range b.sites {
		if n -= a.sites[k]; n > 0 {
			r.Sites[siteName(k[0], k[1])] += n * (sampleMask + 1)
		}
	}
	return r
}

var (
	outMu   sync.Mutex
	outPath = os.Getenv("NVMETD_PERFCOUNT")
	last    snapshot
	begin   snapshot
)

func write(r Report) {
	if outPath == "" {
		return
	}
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	f, err := os.OpenFile(outPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	_, _ = f.Write(append(b, '\n'))
	_ = f.Close()
}

func init() {
	last = take()
	if outPath == "" {
		return
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR2)
	go func() {
		for range c {
			outMu.Lock()
			s := take()
			write(diff("signal", last, s, 0))
			last = s
			outMu.Unlock()
		}
	}()
}

// Begin marks the start of a measured window.
func Begin() {
	outMu.Lock()
	begin = take()
	outMu.Unlock()
}

// End writes the counts since Begin; ios is the number of I/Os the window
// carried.
func End(ios uint64) {
	outMu.Lock()
	write(diff("window", begin, take(), ios))
	outMu.Unlock()
}
