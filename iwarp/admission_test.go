package iwarp

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// admissionListener listens with an Admission and accepts every request
// into a fresh QP, admitting it if admit says so.
func admissionListener(t *testing.T, cfg AdmissionConfig, log *zap.Logger, admit func(*QP) bool) (*Listener, *Admission, chan *QP) {
	t.Helper()
	adm := NewAdmission(cfg, log)
	t.Cleanup(adm.Close)
	ln, err := Listen("tcp", "127.0.0.1:0", &Config{Admission: adm, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	qps := make(chan *QP, 1024)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			req, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			s := newSide(t, QPAttr{})
			if err := req.Accept(s.qp, nil); err != nil {
				continue
			}
			if admit != nil && admit(s.qp) {
				s.qp.Admit()
			}
			qps <- s.qp
		}
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait()
		close(qps)
		for qp := range qps {
			qp.Close()
		}
	})
	return ln, adm, qps
}

// dialMPA opens a TCP connection from local (nil: any) and completes the
// MPA exchange as a raw peer; it returns the connection.
func dialMPA(t *testing.T, addr string, local string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: hang}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	req := stdRequest()
	if _, err := c.Write(req.Append(nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := readMPAFrame(c, 512); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitClosed waits until the peer closes c (EOF or reset).
func waitClosed(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(hang))
	b := make([]byte, 256)
	for {
		_, err := c.Read(b)
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection %v not closed by the listener", c.LocalAddr())
		}
		return
	}
}

// isOpen reports whether the peer has not closed c (nothing to read, no EOF).
func isOpen(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	defer c.SetReadDeadline(time.Time{})
	var b [1]byte
	_, err := c.Read(b[:])
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// A connection that is never admitted is closed after the pending timeout,
// counted as timed out; an admitted one stays. The admitted connection logs
// in while the pending timeout is an hour; the short one (300 ms) applies
// to the connections accepted after it is set (SetConfig), so that the
// admitted one's MPA exchange and admission cannot run into it on a loaded
// machine. The silent connection sends its MPA request; whether the reply
// comes before the close depends on the machine's speed, and either is
// right.
func TestAdmissionPendingTimeout(t *testing.T) {
	var admitNext sync.Mutex
	admit := true
	ln, adm, _ := admissionListener(t, AdmissionConfig{PendingTimeout: time.Hour}, nil, func(*QP) bool {
		admitNext.Lock()
		defer admitNext.Unlock()
		a := admit
		admit = false
		return a // the first one logs in
	})
	admitted := dialMPA(t, ln.Addr().String(), "")
	for deadline := time.Now().Add(hang); adm.Stats().Admitted < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first connection was not admitted in %v", hang)
		}
	}
	cfg := adm.Config()
	cfg.PendingTimeout = 300 * time.Millisecond
	adm.SetConfig(cfg)

	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	req := stdRequest()
	_, _ = silent.Write(req.Append(nil))
	start := time.Now()
	waitClosed(t, silent)
	t.Logf("silent connection closed %v after its MPA request (pending timeout 300ms)", time.Since(start).Round(time.Millisecond))
	if !isOpen(admitted) {
		t.Fatal("the admitted connection was closed")
	}
	// A peer that never even sends its MPA request is pending too.
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	waitClosed(t, raw)
	st := adm.Stats()
	if st.TimedOut < 2 || st.Admitted != 1 {
		t.Fatalf("stats %+v: want two timed out and one admitted", st)
	}
}

// When MaxPending is reached, the oldest pending connection makes room: a
// flood of silent peers cannot keep a new one out.
func TestAdmissionEvictsOldestPending(t *testing.T) {
	ln, adm, _ := admissionListener(t, AdmissionConfig{MaxPending: 4, MaxPendingPerAddr: 100, PendingTimeout: time.Hour}, nil, nil)
	var conns []net.Conn
	for i := 0; i < 4; i++ {
		conns = append(conns, dialMPA(t, ln.Addr().String(), ""))
	}
	fifth := dialMPA(t, ln.Addr().String(), "")
	waitClosed(t, conns[0])
	for _, c := range append(conns[1:], fifth) {
		if !isOpen(c) {
			t.Fatalf("%v closed; only the oldest should be", c.LocalAddr())
		}
	}
	if st := adm.Stats(); st.Evicted != 1 || st.Pending != 4 {
		t.Fatalf("stats %+v: want 1 evicted, 4 pending", st)
	}
}

// Per remote address: one address filling its share evicts its own oldest,
// not another address's connections.
func TestAdmissionPerAddress(t *testing.T) {
	ln, adm, _ := admissionListener(t, AdmissionConfig{MaxPending: 100, MaxPendingPerAddr: 2, PendingTimeout: time.Hour}, nil, nil)
	other := dialMPA(t, ln.Addr().String(), "127.0.0.2")
	a1 := dialMPA(t, ln.Addr().String(), "127.0.0.3")
	a2 := dialMPA(t, ln.Addr().String(), "127.0.0.3")
	a3 := dialMPA(t, ln.Addr().String(), "127.0.0.3")
	waitClosed(t, a1)
	for _, c := range []net.Conn{other, a2, a3} {
		if !isOpen(c) {
			t.Fatalf("%v closed", c.LocalAddr())
		}
	}
	if st := adm.Stats(); st.Evicted != 1 {
		t.Fatalf("stats %+v: want 1 evicted", st)
	}
}

// With every connection admitted and MaxConns reached, a new connection is
// refused at once (closed without an MPA reply); when one goes, there is room.
func TestAdmissionMaxConns(t *testing.T) {
	ln, adm, qps := admissionListener(t, AdmissionConfig{MaxConns: 3, PendingTimeout: time.Hour}, nil, func(*QP) bool { return true })
	var conns []net.Conn
	for i := 0; i < 3; i++ {
		conns = append(conns, dialMPA(t, ln.Addr().String(), ""))
		<-qps
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := stdRequest()
	_, _ = c.Write(req.Append(nil))
	_ = c.SetReadDeadline(time.Now().Add(hang))
	if _, err := io.ReadFull(c, make([]byte, 1)); err == nil {
		t.Fatal("a connection beyond MaxConns got an MPA reply")
	}
	if st := adm.Stats(); st.Refused != 1 {
		t.Fatalf("stats %+v: want 1 refused", st)
	}
	// One admitted connection leaves: room for another.
	conns[0].Close()
	for {
		if st := adm.Stats(); st.Connections < 3 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	dialMPA(t, ln.Addr().String(), "")
}

// Events beyond the burst are not logged one by one: a flood of 200 timed
// out connections writes LogBurst lines and summaries, not 200 lines.
func TestAdmissionLogIsRateLimited(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	ln, adm, _ := admissionListener(t, AdmissionConfig{MaxPending: 10, MaxPendingPerAddr: 1000, PendingTimeout: time.Hour, LogInterval: time.Hour, LogBurst: 5}, zap.New(core), nil)
	for i := 0; i < 200; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	for adm.Stats().Evicted < 190 {
		time.Sleep(5 * time.Millisecond)
	}
	if n := logs.Len(); n != 5 {
		t.Fatalf("%d lines logged for 190 evictions before the summary, want 5", n)
	}
	adm.Close()
	sum := logs.FilterMessageSnippet("rate limit").All()
	if len(sum) != 1 || sum[0].ContextMap()["count"] != int64(185) {
		t.Fatalf("summary lines %v: want one counting 185 events", sum)
	}
}
