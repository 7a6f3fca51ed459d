package rawpeer

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// Direction is the way an FPDU travels through a Proxy.
type Direction uint8

// Directions.
const (
	// ToResponder: from the initiator (host) to the responder (controller).
	ToResponder Direction = iota
	// ToInitiator: from the responder to the initiator.
	ToInitiator
)

// Link is one connection through a Proxy: the initiator's side (accepted)
// and the responder's side (dialled), after the MPA exchange, which the
// proxy relays unchanged (both Conns hold its frames in Req and Reply).
type Link struct {
	// Initiator faces the host; write to it what the host should receive.
	Initiator *Conn
	// Responder faces the controller.
	Responder *Conn
}

// To returns the side that frames going in direction d are written to.
func (l *Link) To(d Direction) *Conn {
	if d == ToResponder {
		return l.Responder
	}
	return l.Initiator
}

// ProxyHook sees every FPDU a Proxy relays, in order per direction, on the
// link's relay goroutine of that direction. It returns true when it took
// care of the frame itself (dropped it, or wrote something else in its
// place with l.To(d) or the other side's methods); false forwards the frame
// unchanged. A replacement that is one message for one keeps the MSN of the
// message it replaces (f.Header.MSN) so that the stream stays in order.
type ProxyHook func(l *Link, d Direction, f *FPDU) bool

// Proxy is a man in the middle between a host and an iWARP responder on
// loopback: each connection it accepts it opens again to the responder,
// relays the MPA exchange, then relays FPDU by FPDU through a hook that may
// replace any of them. It lets a test make a real controller's answers
// wrong on the wire (a Write beyond its buffer, a bogus Send with
// Invalidate, a response longer than the host's buffer, a Terminate)
// without a second controller.
type Proxy struct {
	ln     *net.TCPListener
	target string
	hook   ProxyHook
	opts   Options

	wg     sync.WaitGroup
	mu     sync.Mutex
	links  map[*Link]struct{}
	closed bool
}

// NewProxy listens on 127.0.0.1 and relays to target ("host:port") with
// hook (nil: relay everything). Options apply to both sides of each link;
// their Timeout (default: an hour here) bounds each relay read.
func NewProxy(target string, hook ProxyHook, o Options) (*Proxy, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("rawpeer: proxy: %w", err)
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Hour
	}
	p := &Proxy{ln: ln, target: target, hook: hook, opts: o, links: map[*Link]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address hosts connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops listening, closes every link and waits for the relays.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	links := make([]*Link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.AcceptTCP()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(nc)
	}
}

func (l *Link) close() {
	_ = l.Initiator.Close()
	if l.Responder != nil {
		_ = l.Responder.Close()
	}
}

// serve relays one connection.
func (p *Proxy) serve(nc *net.TCPConn) {
	defer p.wg.Done()
	l := &Link{Initiator: newConn(nc, p.opts)}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = nc.Close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.Timeout)
	defer cancel()
	rc, err := Dial(ctx, p.target, p.opts)
	if err != nil {
		return
	}
	p.mu.Lock()
	l.Responder = rc
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return
	}
	// The MPA exchange, as is.
	req, err := l.Initiator.ReadMPA(0, time.Time{})
	if err != nil || l.Responder.WriteMPA(req) != nil {
		return
	}
	rep, err := l.Responder.ReadMPA(0, time.Time{})
	if err != nil || l.Initiator.WriteMPA(rep) != nil || rep.Reject {
		return
	}
	crc := req.CRC || rep.CRC
	l.Initiator.Req, l.Initiator.Reply, l.Initiator.CRC = req, rep, crc
	l.Responder.Req, l.Responder.Reply, l.Responder.CRC = req, rep, crc
	done := make(chan struct{}, 2)
	go func() { p.relay(l, ToResponder); done <- struct{}{} }()
	go func() { p.relay(l, ToInitiator); done <- struct{}{} }()
	<-done // one side ended: end the link
	l.close()
	<-done
}

// relay moves FPDUs in direction d until either side fails.
func (p *Proxy) relay(l *Link, d Direction) {
	from, to := l.Initiator, l.Responder
	if d == ToInitiator {
		from, to = l.Responder, l.Initiator
	}
	for {
		f, err := from.ReadFPDU(time.Time{})
		if err != nil {
			return // closed, reset, or bytes that are no FPDU: the link ends
		}
		if p.hook != nil && p.hook(l, d, f) {
			continue
		}
		if to.WriteRaw(f.Raw) != nil {
			return
		}
	}
}
