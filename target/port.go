package target

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/nvmeof/rdma"
	"github.com/nvmetd/nvmetd/nvmeof/tcp"
)

// listener is a port's listener, of either transport binding.
type listener interface {
	Addr() net.Addr
	Close() error
	// serveOne waits for the next queue connection and opens its queue.
	serveOne(ctx context.Context, p *port) error
}

type rdmaListener struct{ *rdma.Listener }

func (l rdmaListener) serveOne(ctx context.Context, p *port) error {
	req, err := l.Accept(ctx)
	if err == nil {
		p.accept(req)
	}
	return err
}

type tcpListener struct{ *tcp.Listener }

func (l tcpListener) serveOne(ctx context.Context, p *port) error {
	req, err := l.Accept(ctx)
	if err == nil {
		p.acceptTCP(req)
	}
	return err
}

// openListener listens on the port's address with its transport.
func openListener(pc *PortConfig, lc listenConfig) (listener, error) {
	if pc.IsTCP() {
		ln, err := tcp.Listen(pc.Network(), pc.ListenAddress(), lc.tcp)
		if err != nil {
			return nil, err
		}
		return tcpListener{ln}, nil
	}
	ln, err := rdma.Listen(pc.Network(), pc.ListenAddress(), lc.rdma)
	if err != nil {
		return nil, err
	}
	return rdmaListener{ln}, nil
}

// port is one listener: an rdma.Listener or a tcp.Listener on the port's
// address serving the discovery subsystem and the port's subsystems.
type port struct {
	s  *server
	id uint16
	// cfg is guarded by server.regMu.
	cfg PortConfig

	// The listener and its accept loop; replaced when the port re-listens.
	lmu       sync.Mutex
	ln        listener
	cancel    context.CancelFunc
	done      chan struct{}
	lerr      string
	listening atomic.Bool

	mu     sync.Mutex
	queues map[*queue]struct{}
	closed bool

	// ana is the port's state of every ANA group (read on every I/O).
	ana atomic.Pointer[anaView]
}

func newPort(s *server, cfg PortConfig) *port {
	p := &port{s: s, id: cfg.ID, cfg: cfg, queues: map[*queue]struct{}{}}
	p.setANA(&cfg)
	return p
}

// serves reports whether the port serves the subsystem nqn. The caller
// holds server.regMu.
func (p *port) serves(nqn string) bool { return slices.Contains(p.cfg.Subsystems, nqn) }

// listen opens the listener with the given settings and starts accepting.
func (p *port) listen(pc PortConfig, cc listenConfig) error {
	ln, err := openListener(&pc, cc)
	p.lmu.Lock()
	defer p.lmu.Unlock()
	if err != nil {
		p.lerr = err.Error()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.ln, p.cancel, p.done, p.lerr = ln, cancel, make(chan struct{}), ""
	p.listening.Store(true)
	go p.acceptLoop(ctx, ln, p.done)
	return nil
}

// stopListening closes the listener and waits for its accept loop; queues
// already accepted go on.
func (p *port) stopListening(why string) {
	p.lmu.Lock()
	ln, cancel, done := p.ln, p.cancel, p.done
	p.ln, p.cancel, p.done = nil, nil, nil
	if ln != nil {
		p.lerr = why
	}
	p.lmu.Unlock()
	if ln == nil {
		return
	}
	p.listening.Store(false)
	cancel()
	_ = ln.Close()
	<-done
}

func (p *port) acceptLoop(ctx context.Context, ln listener, done chan struct{}) {
	defer close(done)
	for {
		err := ln.serveOne(ctx, p)
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		// The listener died under us (the socket failed): the port says
		// so (status, health, the systemd watchdog) and listens again.
		p.s.log.Error("port stopped accepting; listening again", zap.Uint16("port_id", p.id), zap.Stringer("address", ln.Addr()), zap.Error(err))
		p.lmu.Lock()
		p.lerr = "accept: " + err.Error()
		p.lmu.Unlock()
		p.listening.Store(false)
		_ = ln.Close()
		if ln = p.relisten(ctx); ln == nil {
			return
		}
	}
}

// relisten opens the port's listener again after its accept loop failed,
// retrying with backoff until it succeeds or the port stops (nil).
func (p *port) relisten(ctx context.Context) listener {
	delay := 100 * time.Millisecond
	for {
		p.s.regMu.RLock()
		pc := p.cfg
		cfg := p.s.cfg
		p.s.regMu.RUnlock()
		cc, err := p.s.controllerConfig(cfg, &pc)
		var ln listener
		if err == nil {
			ln, err = openListener(&pc, cc)
		}
		if err == nil {
			p.lmu.Lock()
			if p.done == nil { // stopListening ran meanwhile
				p.lmu.Unlock()
				_ = ln.Close()
				return nil
			}
			p.ln, p.lerr = ln, ""
			p.lmu.Unlock()
			p.listening.Store(true)
			p.s.log.Info("port listening again", zap.Uint16("port_id", p.id), zap.String("address", pc.ListenAddress()))
			return ln
		}
		p.lmu.Lock()
		p.lerr = "listen: " + err.Error()
		p.lmu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// accept opens a queue for a host's connection request.
func (p *port) accept(req *rdma.QueueRequest) {
	s := p.s
	q := newQueue(s, p, req)
	if s.stopping.Load() || !p.addQueue(q) {
		s.met.event(eventRefused, "", "port_closed")
		_ = req.Reject(rdma.CMRejectNoResources)
		return
	}
	conn, err := req.Accept(q)
	if err != nil {
		p.removeQueue(q)
		var rej *rdma.CMRejectError
		if errors.As(err, &rej) {
			s.met.event(eventRefused, "", "cm_reject")
			s.adm.Log(zap.InfoLevel, "queue_refused", "queue refused", append(q.fields(), zap.Error(err))...)
		} else {
			s.adm.Log(zap.WarnLevel, "accept_failed", "queue accept failed", append(q.fields(), zap.Error(err))...)
		}
		return
	}
	q.conn.CompareAndSwap(nil, conn)
	s.traceQueue(q)
	s.log.Debug("queue connected", append(q.fields(), zap.Uint16("port_id", p.id), zap.Int("size", q.size))...)
}

// acceptTCP opens an NVMe/TCP queue for a host's connection.
func (p *port) acceptTCP(req *tcp.QueueRequest) {
	s := p.s
	q := newQueueTCP(s, p, req)
	if s.stopping.Load() || !p.addQueue(q) {
		s.met.event(eventRefused, "", "port_closed")
		_ = req.Reject()
		return
	}
	if _, err := req.Accept((*tcpQueue)(q)); err != nil {
		p.removeQueue(q)
		s.adm.Log(zap.WarnLevel, "accept_failed", "queue accept failed", append(q.fields(), zap.Error(err))...)
		return
	}
	s.log.Debug("queue connected", append(q.fields(), zap.Uint16("port_id", p.id), zap.Int("size", q.size), zap.String("transport", "tcp"))...)
}

func (p *port) addQueue(q *queue) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.queues[q] = struct{}{}
	return true
}

func (p *port) removeQueue(q *queue) {
	p.mu.Lock()
	delete(p.queues, q)
	p.mu.Unlock()
}

// queueList returns the port's queues.
func (p *port) queueList() []*queue {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := make([]*queue, 0, len(p.queues))
	for q := range p.queues {
		list = append(list, q)
	}
	return list
}

// shut stops the port for good: no more queues, and every queue on it is
// disconnected (an admin queue takes its controller along).
func (p *port) shut(why string) {
	p.stopListening(why)
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	for _, q := range p.queueList() {
		q.close()
	}
}

// status returns whether the port listens and why not.
func (p *port) status() (bool, string) {
	p.lmu.Lock()
	defer p.lmu.Unlock()
	return p.listening.Load(), p.lerr
}
