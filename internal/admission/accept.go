package admission

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Acceptor takes connections off a TCP listener for an Admission, the same
// way for every transport: accept errors that a flood of peers causes (out
// of file descriptors, an aborted connection, out of buffers or memory) are
// retried with a back-off up to one second instead of ending the listener,
// and when descriptors run out a spare one is given up to take a waiting
// connection off the backlog and close it, so that a full table does not
// leave peers hanging in the backlog (libevent's and nginx's technique).
// Each connection taken enters the Admission (which may refuse it); with a
// nil Admission every connection is taken, without a Ticket.
//
// One goroutine calls Accept; Close after the listener is closed.
type Acceptor struct {
	ln     *net.TCPListener
	adm    *Admission
	closed <-chan struct{}
	log    *zap.Logger
	name   string
	spare  *os.File
	delay  time.Duration
}

// NewAcceptor returns an Acceptor of ln; closed is closed when the owner
// closes ln (accept errors after it end Accept quietly); name prefixes the
// log lines ("iwarp", "nvme-tcp").
func NewAcceptor(ln *net.TCPListener, adm *Admission, closed <-chan struct{}, log *zap.Logger, name string) *Acceptor {
	if log == nil {
		log = zap.NewNop()
	}
	a := &Acceptor{ln: ln, adm: adm, closed: closed, log: log, name: name}
	a.spare, _ = os.Open(os.DevNull)
	return a
}

// ErrClosed is Accept's error once the listener is closed.
var ErrClosed = errors.New("listener closed")

// Accept returns the next connection the Admission takes, with its Ticket
// (nil without an Admission). It fails with ErrClosed once closed is
// closed, or with the accept error that ended the listener (anything but
// the errors a flood causes).
func (a *Acceptor) Accept() (*net.TCPConn, *Ticket, error) {
	for {
		c, err := a.ln.AcceptTCP()
		if err != nil {
			select {
			case <-a.closed:
				return nil, nil, ErrClosed
			default:
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				a.shed()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) {
				a.delay = min(max(2*a.delay, 5*time.Millisecond), time.Second)
				a.log.Warn(a.name+": accept", zap.Error(err), zap.Duration("retry", a.delay))
				select {
				case <-time.After(a.delay):
				case <-a.closed:
					return nil, nil, ErrClosed
				}
				continue
			}
			a.log.Error(a.name+": accept loop stopped", zap.Stringer("address", a.ln.Addr()), zap.Error(err))
			return nil, nil, fmt.Errorf("%s: accept: %w", a.name, err)
		}
		a.delay = 0
		if a.adm == nil {
			return c, nil, nil
		}
		if t := a.adm.Enter(c); t != nil {
			return c, t, nil
		}
		_ = c.Close()
	}
}

// shed uses the spare descriptor to take one waiting connection off the
// backlog and close it, when accept failed for lack of descriptors.
func (a *Acceptor) shed() {
	if a.spare == nil {
		return
	}
	a.spare.Close()
	a.spare = nil
	if c, err := a.ln.AcceptTCP(); err == nil {
		_ = c.SetLinger(0)
		c.Close()
		if a.adm != nil {
			a.adm.Note("refused", "connection refused: out of file descriptors", c.RemoteAddr().String())
		}
	}
	a.spare, _ = os.Open(os.DevNull)
}

// Close gives up the spare descriptor (after the accept loop ended).
func (a *Acceptor) Close() {
	if a.spare != nil {
		a.spare.Close()
		a.spare = nil
	}
}
