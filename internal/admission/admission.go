// Package admission bounds the connections peers can make a server hold,
// whatever the transport: the iWARP engine's MPA listeners (NVMe/RDMA) and
// the NVMe/TCP listeners of one daemon share one Admission, so that
// limits.max_pending, max_pending_per_address, max_connections and the
// connect timeout cap them together.
package admission

import (
	"container/list"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nvmetd/nvmetd/internal/ratelog"
)

// Admission bounds the connections a peer can make a server hold. A
// connection is pending from the moment its TCP connection is accepted
// until the upper layer admits it (Ticket.Admit: for NVMe over Fabrics, a
// successful Fabrics Connect); pending connections are capped in number (in all and per remote
// address) and in time, and all connections together are capped. When the
// pending cap is reached, the oldest pending connection is closed to make
// room for the new one: a flood of connections that never log in cannot
// keep a legitimate peer out, because a legitimate peer logs in within
// milliseconds and the flood's oldest connections are closed first. When
// the cap on all connections is reached and nothing is pending, new
// connections are refused.
//
// Refusals and evictions are logged rate-limited: the first few in each
// interval one by one, the rest as one summary line per interval.
//
// One Admission may serve several listeners (a daemon's ports).
type Admission struct {
	cfg Config
	log *zap.Logger

	mu      sync.Mutex
	pending list.List // of *Ticket, oldest first
	byAddr  map[netip.Addr]int
	conns   int
	timer   *time.Timer
	closed  bool
	stats   Stats
	rl      *ratelog.Limiter
}

// Config sets the caps. Zero fields take the defaults named.
type Config struct {
	// MaxPending caps connections not yet admitted (default 128).
	MaxPending int
	// MaxPendingPerAddr caps pending connections of one remote address
	// (default 16).
	MaxPendingPerAddr int
	// MaxConns caps all connections (default: RLIMIT_NOFILE less a
	// reserve of 64 for files and listeners, at least 64).
	MaxConns int
	// PendingTimeout closes a connection that is not admitted within this
	// long of its TCP accept (default 10 s).
	PendingTimeout time.Duration
	// LogInterval is the period of the rate-limited log (default 10 s);
	// LogBurst the events logged one by one per period (default 5).
	LogInterval time.Duration
	LogBurst    int
}

// Stats are counters of an Admission.
type Stats struct {
	Pending, Connections int    // now
	Accepted             uint64 // connections taken
	Admitted             uint64
	Refused              uint64 // refused at once: MaxConns reached
	Evicted              uint64 // pending ones closed to make room
	TimedOut             uint64 // pending ones closed after PendingTimeout
}

const (
	defaultMaxPending        = 128
	defaultMaxPendingPerAddr = 16
	fdReserve                = 64
	// DefaultPendingTimeout is the default connect timeout.
	DefaultPendingTimeout = 10 * time.Second
)

// DefaultMaxConns is the default cap on connections: the process's open
// file limit less a reserve.
func DefaultMaxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 && rl.Cur < 1<<31 {
		return max(int(rl.Cur)-fdReserve, fdReserve)
	}
	return 4096
}

// New returns an Admission with the given caps.
func New(cfg Config, log *zap.Logger) *Admission {
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = defaultMaxPending
	}
	if cfg.MaxPendingPerAddr <= 0 {
		cfg.MaxPendingPerAddr = defaultMaxPendingPerAddr
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns()
	}
	if cfg.PendingTimeout <= 0 {
		cfg.PendingTimeout = DefaultPendingTimeout
	}
	if cfg.LogInterval <= 0 {
		cfg.LogInterval = 10 * time.Second
	}
	if cfg.LogBurst <= 0 {
		cfg.LogBurst = 5
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Admission{cfg: cfg, log: log, byAddr: map[netip.Addr]int{}, rl: ratelog.New(log, cfg.LogInterval, cfg.LogBurst)}
}

// Config returns the caps in effect.
func (a *Admission) Config() Config {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg
}

// SetConfig changes the caps; they apply to connections accepted from now
// on (and the pending timeout to those accepted from now on).
func (a *Admission) SetConfig(cfg Config) {
	n := New(cfg, a.log) // defaults
	a.mu.Lock()
	a.cfg = n.cfg
	a.mu.Unlock()
}

// Stats returns the counters.
func (a *Admission) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Pending, s.Connections = a.pending.Len(), a.conns
	return s
}

// Close stops the pending timer and flushes the log summary.
func (a *Admission) Close() {
	a.mu.Lock()
	a.closed = true
	if a.timer != nil {
		a.timer.Stop()
	}
	a.mu.Unlock()
	a.rl.Close()
}

// Ticket is one connection known to the Admission, from its accept until
// Release. Its methods may be called on a nil Ticket (a listener without an
// Admission): they do nothing.
type Ticket struct {
	a        *Admission
	addr     netip.Addr
	remote   string
	deadline time.Time
	elem     *list.Element // in pending while pending
	done     bool          // released
	// kill ends the connection: closing its TCP connection until Attach
	// names another way (the iWARP QP, the NVMe/TCP queue running on it).
	mu    sync.Mutex
	conn  net.Conn
	kill  func(error)
	fired bool
}

// ErrEvicted is why a pending connection was closed to make room for a new
// one; ErrNotAdmitted why one was closed for not logging in in time.
var (
	ErrEvicted     = errors.New("connection closed to make room: too many connections not yet logged in")
	ErrNotAdmitted = errors.New("connection closed: not logged in within the connect timeout")
)

// Enter registers a new TCP connection. It returns nil if the connection
// must be refused (the caller closes it).
func (a *Admission) Enter(c net.Conn) *Ticket {
	return a.enter(c, time.Now())
}

func (a *Admission) enter(c net.Conn, now time.Time) *Ticket {
	addr := remoteAddr(c)
	var victims []*Ticket
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	cfg := a.cfg
	// Room among all connections: evict the oldest pending one if full.
	if a.conns >= a.cfg.MaxConns {
		v := a.oldestLocked(func(*Ticket) bool { return true })
		if v == nil {
			a.stats.Refused++
			a.mu.Unlock()
			a.Note("refused", "connection refused: connection limit reached", c.RemoteAddr().String(), zap.Int("max_connections", cfg.MaxConns))
			return nil
		}
		victims = append(victims, v)
		a.dropPendingLocked(v)
	}
	// Room among pending ones, for this address and in all.
	if a.byAddr[addr] >= a.cfg.MaxPendingPerAddr {
		if v := a.oldestLocked(func(e *Ticket) bool { return e.addr == addr }); v != nil {
			victims = append(victims, v)
			a.dropPendingLocked(v)
		}
	}
	if a.pending.Len() >= a.cfg.MaxPending {
		if v := a.oldestLocked(func(*Ticket) bool { return true }); v != nil {
			victims = append(victims, v)
			a.dropPendingLocked(v)
		}
	}
	e := &Ticket{a: a, addr: addr, remote: c.RemoteAddr().String(), deadline: now.Add(a.cfg.PendingTimeout), conn: c}
	e.elem = a.pending.PushBack(e)
	a.byAddr[addr]++
	a.conns++
	a.stats.Accepted++
	a.stats.Evicted += uint64(len(victims))
	if a.pending.Len() == 1 {
		a.armLocked(now)
	}
	a.mu.Unlock()
	for _, v := range victims {
		a.Note("evicted", "pending connection closed to make room", v.remote, zap.Int("max_pending", cfg.MaxPending), zap.Int("max_pending_per_address", cfg.MaxPendingPerAddr))
		v.end(ErrEvicted)
	}
	return e
}

// oldestLocked returns the oldest pending entry that match accepts.
func (a *Admission) oldestLocked(match func(*Ticket) bool) *Ticket {
	for el := a.pending.Front(); el != nil; el = el.Next() {
		if e := el.Value.(*Ticket); match(e) {
			return e
		}
	}
	return nil
}

// dropPendingLocked takes e off the pending list (it still counts as a
// connection until released).
func (a *Admission) dropPendingLocked(e *Ticket) {
	if e.elem == nil {
		return
	}
	a.pending.Remove(e.elem)
	e.elem = nil
	if n := a.byAddr[e.addr] - 1; n > 0 {
		a.byAddr[e.addr] = n
	} else {
		delete(a.byAddr, e.addr)
	}
}

// armLocked sets the timer for the oldest pending entry.
func (a *Admission) armLocked(now time.Time) {
	front := a.pending.Front()
	if front == nil || a.closed {
		return
	}
	d := max(front.Value.(*Ticket).deadline.Sub(now), 0)
	if a.timer == nil {
		a.timer = time.AfterFunc(d, a.expire)
	} else {
		a.timer.Reset(d)
	}
}

// expire closes pending connections past their deadline.
func (a *Admission) expire() {
	now := time.Now()
	var victims []*Ticket
	a.mu.Lock()
	for el := a.pending.Front(); el != nil; {
		e := el.Value.(*Ticket)
		if e.deadline.After(now) {
			break
		}
		el = el.Next()
		a.dropPendingLocked(e)
		victims = append(victims, e)
	}
	a.stats.TimedOut += uint64(len(victims))
	a.armLocked(now)
	timeout := a.cfg.PendingTimeout
	a.mu.Unlock()
	for _, v := range victims {
		a.Note("timeout", "connection closed: no login within the connect timeout", v.remote, zap.Duration("connect_timeout", timeout))
		v.end(ErrNotAdmitted)
	}
}

// Attach hands the ending of the connection to what now runs on it (an
// iWARP QP, an NVMe/TCP queue): an eviction or a timeout calls kill with
// ErrEvicted or ErrNotAdmitted instead of closing the socket under it. If
// the connection was evicted already, kill is called at once.
func (e *Ticket) Attach(kill func(error)) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.kill = kill
	fired := e.fired
	e.mu.Unlock()
	if fired {
		kill(ErrEvicted)
	}
}

// end ends the connection.
func (e *Ticket) end(why error) {
	e.mu.Lock()
	e.fired = true
	kill, c := e.kill, e.conn
	e.mu.Unlock()
	if kill != nil {
		kill(why)
		return
	}
	_ = c.Close()
}

// Admit marks the connection as logged in: it no longer counts as pending
// and its connect timeout no longer runs.
func (e *Ticket) Admit() {
	if e == nil {
		return
	}
	a := e.a
	a.mu.Lock()
	if e.elem != nil && !e.done {
		a.dropPendingLocked(e)
		a.stats.Admitted++
	}
	a.mu.Unlock()
}

// Release forgets the connection (it is closed). Idempotent.
func (e *Ticket) Release() {
	if e == nil {
		return
	}
	a := e.a
	a.mu.Lock()
	if !e.done {
		e.done = true
		a.dropPendingLocked(e)
		a.conns--
	}
	a.mu.Unlock()
}

// Note logs an event of the admission (refused, evicted, timeout) through
// the rate limiter.
func (a *Admission) Note(reason, msg, remote string, fields ...zap.Field) {
	a.rl.Log(zapcore.WarnLevel, reason, msg, append(fields, zap.String("remote", remote))...)
}

// Log logs an event that peers can cause in bulk (a refused login, a
// connection ended by a protocol error) through the same rate limit as the
// Admission's own refusals and evictions: in each interval the first few
// are logged one by one, the rest counted by reason into one summary line.
func (a *Admission) Log(level zapcore.Level, reason, msg string, fields ...zap.Field) {
	a.rl.Log(level, reason, msg, fields...)
}

func remoteAddr(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if ap := ta.AddrPort(); ap.IsValid() {
			return ap.Addr().Unmap()
		}
	}
	return netip.Addr{}
}
