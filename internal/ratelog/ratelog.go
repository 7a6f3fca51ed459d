// Package ratelog logs events that a peer can cause in bulk (refused or
// failed connections) without letting a flood of them flood the log: in each
// interval the first few events are logged one by one, the rest are counted
// and reported as one summary line when the interval ends.
package ratelog

import (
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Limiter is a rate-limited logger. The zero value is not usable; call New.
type Limiter struct {
	log      *zap.Logger
	interval time.Duration
	burst    int

	mu     sync.Mutex
	start  time.Time // of the current interval
	logged int
	quiet  map[string]int // events by kind not logged one by one
	timer  *time.Timer
	closed bool
}

// New returns a Limiter that logs at most burst events one by one per
// interval (defaults 5 and 10 s when not positive).
func New(log *zap.Logger, interval time.Duration, burst int) *Limiter {
	if interval <= 0 {
		interval = 10 * time.Second
	}
	if burst <= 0 {
		burst = 5
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Limiter{log: log, interval: interval, burst: burst, quiet: map[string]int{}}
}

// EventKey is the key of the field Log adds to a line it lets through: the
// event's kind (its summary key). It is not "reason": callers put their own
// reason (why a connection was refused) in that key, and a JSON line must
// not carry one key twice.
const EventKey = "event"

// Log logs one event: msg with fields at level, unless the interval's burst
// is used up, in which case it is counted under event (a kind, such as
// "connect_refused") for the summary. The line carries the kind under
// EventKey.
func (l *Limiter) Log(level zapcore.Level, event, msg string, fields ...zap.Field) {
	now := time.Now()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	if l.start.IsZero() || now.Sub(l.start) >= l.interval {
		l.start, l.logged = now, 0
	}
	if l.logged < l.burst {
		l.logged++
		l.mu.Unlock()
		if ce := l.log.Check(level, msg); ce != nil {
			ce.Write(append(fields, zap.String(EventKey, event))...)
		}
		return
	}
	l.quiet[event]++
	if l.timer == nil {
		l.timer = time.AfterFunc(l.start.Add(l.interval).Sub(now), l.Flush)
	}
	l.mu.Unlock()
}

// Flush writes the summary of the events not logged one by one, if any.
func (l *Limiter) Flush() {
	l.mu.Lock()
	l.timer = nil
	if len(l.quiet) == 0 {
		l.mu.Unlock()
		return
	}
	reasons := make([]string, 0, len(l.quiet))
	total := 0
	for r, n := range l.quiet {
		reasons = append(reasons, r)
		total += n
	}
	sort.Strings(reasons)
	counts := make([]zap.Field, 0, len(reasons)+3)
	counts = append(counts, zap.Int("count", total), zap.Time("since", l.start))
	for _, r := range reasons {
		counts = append(counts, zap.Int(r, l.quiet[r]))
	}
	clear(l.quiet)
	l.mu.Unlock()
	l.log.Warn("events not logged one by one (rate limit)", counts...)
}

// Close writes the last summary and stops the limiter.
func (l *Limiter) Close() {
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.Flush()
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}
