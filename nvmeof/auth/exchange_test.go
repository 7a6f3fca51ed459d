package auth

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
)

const testSubNQN = "nqn.2024-01.io.nvmetd:test"

func testSecret(label string, h Hash, n int) *Secret {
	return &Secret{Hash: h, Key: detBytes(label, n)}
}

// keys of the tests: a host key transformed with SHA-256 and an
// untransformed 48-byte controller key.
var (
	hostSecret = testSecret("host", HashSHA256, 32)
	ctrlSecret = testSecret("ctrl", HashNone, 48)
)

// outcome is what one transaction did on both sides.
type outcome struct {
	hostErr  error
	results  []Result // the controller's, in order
	fatal    bool
	msgs     []MessageID // messages exchanged, in order
	ctrlAuth bool
}

// ctrlErr returns the last error the controller reported.
func (o *outcome) ctrlErr() error {
	for i := len(o.results) - 1; i >= 0; i-- {
		if o.results[i].Err != nil {
			return o.results[i].Err
		}
	}
	return nil
}

// tamperFunc may change a message in flight; to and from the controller.
type tamperFunc func(id MessageID, data []byte) []byte

// exchange runs one transaction of h against c as a transport would: each
// HostStep becomes an Authentication Send or Receive SQE for c, and c's
// answer the completion h gets.
func exchange(t *testing.T, h *Host, c *Controller, tid uint16, tamper tamperFunc) *outcome {
	t.Helper()
	o := &outcome{}
	step := h.Start(tid)
	for i := 0; step.Action != HostDone; i++ {
		if i > 10 {
			t.Fatal("transaction does not end")
		}
		var sqe nvmeof.SQE
		switch step.Action {
		case HostSend:
			data := step.Data
			hd, _ := ParseHeader(data)
			o.msgs = append(o.msgs, hd.ID)
			if tamper != nil {
				data = tamper(hd.ID, append([]byte(nil), data...))
			}
			sqe.BuildAuthSend(uint32(len(data)))
			r := c.Send(&sqe, data)
			o.results = append(o.results, r)
			o.fatal = o.fatal || r.Fatal
			step = h.Complete(r.Status, nil)
		case HostReceive:
			sqe.BuildAuthReceive(step.AllocLen)
			r := c.Receive(&sqe, step.AllocLen)
			o.results = append(o.results, r)
			o.fatal = o.fatal || r.Fatal
			if uint32(len(r.Data)) > step.AllocLen {
				t.Fatalf("controller returned %d bytes for AL %d", len(r.Data), step.AllocLen)
			}
			data := make([]byte, step.AllocLen)
			copy(data, r.Data)
			if hd, err := ParseHeader(r.Data); err == nil {
				o.msgs = append(o.msgs, hd.ID)
				if tamper != nil {
					data = tamper(hd.ID, data)
				}
			}
			step = h.Complete(r.Status, data)
		default:
			t.Fatalf("step %+v", step)
		}
	}
	o.hostErr = step.Err
	o.ctrlAuth = c.Authenticated()
	return o
}

func newPair(t *testing.T, hc HostConfig, cc ControllerConfig) (*Host, *Controller) {
	t.Helper()
	if hc.HostNQN == "" {
		hc.HostNQN, hc.SubNQN = testHostNQN, testSubNQN
	}
	if cc.HostNQN == "" {
		cc.HostNQN, cc.SubNQN = testHostNQN, testSubNQN
	}
	if hc.Rand == nil {
		hc.Rand = detReader("host " + t.Name())
	}
	if cc.Rand == nil {
		cc.Rand = detReader("ctrl " + t.Name())
	}
	h, err := NewHost(hc)
	if err != nil {
		t.Fatal(err)
	}
	return h, mustController(t, cc)
}

// TestExchangeAll authenticates every hash × DH group, unidirectionally
// and bidirectionally, host against controller.
func TestExchangeAll(t *testing.T) {
	for _, hash := range AllHashes {
		for _, group := range AllDHGroups {
			for _, bidi := range []bool{false, true} {
				name := fmt.Sprintf("%v/%v/bidi=%v", hash, group, bidi)
				t.Run(name, func(t *testing.T) {
					hc := HostConfig{Secret: hostSecret}
					cc := ControllerConfig{HostSecret: hostSecret, CtrlSecret: ctrlSecret, Hash: hash, DHGroup: group, Timeout: 5 * time.Second}
					if bidi {
						hc.CtrlSecret = ctrlSecret
					}
					h, c := newPair(t, hc, cc)
					o := exchange(t, h, c, 1, nil)
					if o.hostErr != nil || !o.ctrlAuth || o.fatal || o.ctrlErr() != nil {
						t.Fatalf("host %v, controller authenticated %v fatal %v: %v", o.hostErr, o.ctrlAuth, o.fatal, o.ctrlErr())
					}
					want := []MessageID{MsgNegotiate, MsgChallenge, MsgReply, MsgSuccess1}
					if bidi {
						want = append(want, MsgSuccess2)
					}
					if fmt.Sprint(o.msgs) != fmt.Sprint(want) {
						t.Errorf("messages %v, want %v", o.msgs, want)
					}
					if hh, hg := h.Negotiated(); hh != hash || hg != group {
						t.Errorf("host negotiated %v %v", hh, hg)
					}
					if ch, cg := c.Negotiated(); ch != hash || cg != group {
						t.Errorf("controller negotiated %v %v", ch, cg)
					}
					// The timer: armed by every Send that leaves the
					// transaction open, stopped at its end.
					if r := o.results[0]; r.Timer != TimerArm || r.Timeout != 5*time.Second {
						t.Errorf("after negotiate: timer %v %v", r.Timer, r.Timeout)
					}
					if r := o.results[len(o.results)-1]; r.Timer != TimerStop || !r.Authenticated {
						t.Errorf("last result %+v", r)
					}
				})
			}
		}
	}
}

// failure checks that a transaction failed on the host with expl (remote
// when the controller reported it) and that the controller is torn down.
func checkFailure(t *testing.T, o *outcome, expl Explanation, remote bool) {
	t.Helper()
	var e *Error
	if !errors.As(o.hostErr, &e) {
		t.Fatalf("host: %v, want an *Error", o.hostErr)
	}
	if e.Explanation != expl || e.Remote != remote {
		t.Errorf("host: %v (explanation %v remote %v), want %v remote %v", e, e.Explanation, e.Remote, expl, remote)
	}
	if e.Status() != nvmeof.StatusAuthRequired|nvmeof.StatusDNR {
		t.Errorf("host status %v", e.Status())
	}
	if o.ctrlAuth || !o.fatal {
		t.Errorf("controller authenticated %v fatal %v", o.ctrlAuth, o.fatal)
	}
}

func TestExchangeFailures(t *testing.T) {
	other := testSecret("other", HashSHA256, 32)
	for _, tc := range []struct {
		name   string
		hc     HostConfig
		cc     ControllerConfig
		tamper tamperFunc
		expl   Explanation
		remote bool // the controller reported it in AUTH_Failure1
		ctrl   Explanation
	}{
		{name: "wrong host key", hc: HostConfig{Secret: other}, cc: ControllerConfig{HostSecret: hostSecret, DHGroup: FFDHE2048},
			expl: ExplFailed, remote: true, ctrl: ExplFailed},
		{name: "wrong controller key", hc: HostConfig{Secret: hostSecret, CtrlSecret: other},
			cc: ControllerConfig{HostSecret: hostSecret, CtrlSecret: ctrlSecret, DHGroup: FFDHE3072}, expl: ExplFailed},
		{name: "no host key on the controller", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{},
			expl: ExplFailed, remote: true, ctrl: ExplFailed},
		{name: "no controller key on the controller", hc: HostConfig{Secret: hostSecret, CtrlSecret: ctrlSecret},
			cc: ControllerConfig{HostSecret: hostSecret}, expl: ExplFailed, remote: true, ctrl: ExplFailed},
		{name: "group not offered", hc: HostConfig{Secret: hostSecret, DHGroups: []DHGroup{DHGroupNull}},
			cc: ControllerConfig{HostSecret: hostSecret, DHGroup: FFDHE4096}, expl: ExplDHGroupUnusable, remote: true, ctrl: ExplDHGroupUnusable},
		{name: "hash falls back", hc: HostConfig{Secret: hostSecret, Hashes: []Hash{HashSHA512}, DHGroups: []DHGroup{FFDHE2048}},
			cc: ControllerConfig{HostSecret: hostSecret, Hash: HashSHA256, CtrlSecret: ctrlSecret, DHGroup: FFDHE2048}},
		{name: "challenge hash not offered", hc: HostConfig{Secret: hostSecret, Hashes: []Hash{HashSHA256}},
			cc: ControllerConfig{HostSecret: hostSecret}, expl: ExplHashUnusable,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgChallenge {
					b[8] = byte(HashSHA384)
				}
				return b
			}},
		{name: "challenge HL wrong", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret}, expl: ExplHashUnusable,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgChallenge {
					b[6] = 20
				}
				return b
			}},
		{name: "challenge DH value p-1", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret, DHGroup: FFDHE2048},
			expl: ExplIncorrectPayload,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgChallenge {
					p, _ := hexDecode(ffdheHex[0])
					p[len(p)-1]--
					copy(b[16+32:], p)
				}
				return b
			}},
		{name: "challenge DH value missing", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret, DHGroup: FFDHE2048},
			expl: ExplDHGroupUnusable,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgChallenge {
					b[10], b[11] = 0, 0
				}
				return b
			}},
		{name: "challenge DH value for NULL", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret},
			expl: ExplIncorrectPayload,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgChallenge {
					b[10] = 4
				}
				return b
			}},
		{name: "challenge truncated", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret, DHGroup: FFDHE2048},
			expl: ExplIncorrectPayload,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgChallenge {
					return b[:100]
				}
				return b
			}},
		{name: "challenge of another transaction", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret},
			expl: ExplIncorrectMessage,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgChallenge {
					b[4]++
				}
				return b
			}},
		{name: "reply DH value 1", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret, DHGroup: FFDHE2048},
			expl: ExplDHGroupUnusable, remote: true, ctrl: ExplDHGroupUnusable,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgReply {
					clear(b[16+64:])
					b[len(b)-1] = 1
				}
				return b
			}},
		{name: "reply without DH value", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret, DHGroup: FFDHE2048},
			expl: ExplIncorrectPayload, remote: true, ctrl: ExplIncorrectPayload,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgReply {
					b[10], b[11] = 0, 0
					return b[:16+64]
				}
				return b
			}},
		{name: "reply truncated", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret},
			expl: ExplIncorrectPayload, remote: true, ctrl: ExplIncorrectPayload,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgReply {
					return b[:40]
				}
				return b
			}},
		{name: "reply HL wrong", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret},
			expl: ExplFailed, remote: true, ctrl: ExplFailed,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgReply {
					b[6] = 16
				}
				return b
			}},
		{name: "reply of another transaction", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret},
			expl: ExplIncorrectPayload, remote: true, ctrl: ExplIncorrectPayload,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgReply {
					b[4]++
				}
				return b
			}},
		{name: "controller response wrong", hc: HostConfig{Secret: hostSecret, CtrlSecret: ctrlSecret},
			cc: ControllerConfig{HostSecret: hostSecret, CtrlSecret: ctrlSecret, DHGroup: FFDHE2048}, expl: ExplFailed,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgSuccess1 {
					b[20] ^= 1
				}
				return b
			}},
		{name: "controller response missing", hc: HostConfig{Secret: hostSecret, CtrlSecret: ctrlSecret},
			cc: ControllerConfig{HostSecret: hostSecret, CtrlSecret: ctrlSecret}, expl: ExplFailed,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgSuccess1 {
					b[8] = 0
				}
				return b
			}},
		{name: "success1 HL wrong", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret},
			expl: ExplHashUnusable,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgSuccess1 {
					b[6] = 48
				}
				return b
			}},
		{name: "success1 replaced by a challenge", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret},
			expl: ExplIncorrectMessage,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgSuccess1 {
					b[1] = byte(MsgChallenge)
				}
				return b
			}},
		{name: "negotiate with concatenation", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret},
			expl: ExplConcatMismatch, remote: true, ctrl: ExplConcatMismatch,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgNegotiate {
					b[6] = SCCNewTLSPSK
				}
				return b
			}},
		{name: "negotiate with two descriptors", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret},
			expl: ExplHashUnusable, remote: true, ctrl: ExplHashUnusable,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgNegotiate {
					b[7] = 2
				}
				return b
			}},
		{name: "negotiate with another protocol", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret},
			expl: ExplIncorrectPayload, remote: true, ctrl: ExplIncorrectPayload,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgNegotiate {
					b[8] = 2
				}
				return b
			}},
		{name: "negotiate without hashes", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret},
			expl: ExplHashUnusable, remote: true, ctrl: ExplHashUnusable,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgNegotiate {
					b[10] = 0
				}
				return b
			}},
		{name: "negotiate with HALEN 31", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret},
			expl: ExplIncorrectPayload, remote: true, ctrl: ExplIncorrectPayload,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgNegotiate {
					b[10] = 31
				}
				return b
			}},
		{name: "negotiate truncated", hc: HostConfig{Secret: hostSecret}, cc: ControllerConfig{HostSecret: hostSecret},
			expl: ExplIncorrectPayload, remote: true, ctrl: ExplIncorrectPayload,
			tamper: func(id MessageID, b []byte) []byte {
				if id == MsgNegotiate {
					return b[:71]
				}
				return b
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, c := newPair(t, tc.hc, tc.cc)
			o := exchange(t, h, c, 9, tc.tamper)
			if tc.expl == 0 {
				if o.hostErr != nil || !o.ctrlAuth {
					t.Fatalf("host %v controller %v", o.hostErr, o.ctrlAuth)
				}
				return
			}
			checkFailure(t, o, tc.expl, tc.remote)
			var ce *Error
			if !errors.As(o.ctrlErr(), &ce) {
				t.Fatalf("controller error %v", o.ctrlErr())
			}
			if tc.remote {
				if ce.Explanation != tc.ctrl || ce.Remote {
					t.Errorf("controller: %v", ce)
				}
				if last := o.msgs[len(o.msgs)-1]; last != MsgFailure1 {
					t.Errorf("messages %v", o.msgs)
				}
			} else {
				// The host reported it with AUTH_Failure2.
				if ce.Explanation != tc.expl || !ce.Remote || o.msgs[len(o.msgs)-1] != MsgFailure2 {
					t.Errorf("controller: %v, messages %v", ce, o.msgs)
				}
			}
		})
	}
}

func hexDecode(s string) ([]byte, error) {
	b := make([]byte, len(s)/2)
	for i := range b {
		var v byte
		for _, c := range s[2*i : 2*i+2] {
			v <<= 4
			switch {
			case c >= '0' && c <= '9':
				v |= byte(c - '0')
			case c >= 'a' && c <= 'f':
				v |= byte(c - 'a' + 10)
			}
		}
		b[i] = v
	}
	return b, nil
}

// sqe builds an Authentication Send or Receive SQE.
func sqe(send bool, n uint32) *nvmeof.SQE {
	var s nvmeof.SQE
	if send {
		s.BuildAuthSend(n)
	} else {
		s.BuildAuthReceive(n)
	}
	return &s
}

// TestControllerSequence drives the controller with messages out of
// sequence, as a hostile host would.
func TestControllerSequence(t *testing.T) {
	mk := func() *Controller {
		return mustController(t, ControllerConfig{SubNQN: testSubNQN, HostNQN: testHostNQN, HostSecret: hostSecret, Rand: detReader("c")})
	}
	neg := AppendNegotiate(nil, NewNegotiate(3, AllHashes, AllDHGroups))
	send := func(c *Controller, b []byte) Result { return c.Send(sqe(true, uint32(len(b))), b) }
	recv := func(c *Controller, al uint32) Result { return c.Receive(sqe(false, al), al) }

	// A Reply before any negotiation: nvmet's done_failure1, fatal.
	c := mk()
	r := send(c, AppendReply(nil, &Reply{TID: 3, R: make([]byte, 32)}))
	if !r.Fatal || r.Status != 0 || r.Authenticated || r.Timer != TimerStop {
		t.Errorf("reply first: %+v", r)
	}
	// A Receive before any negotiation: AUTH_Failure1 "failed", fatal.
	c = mk()
	r = recv(c, 4096)
	if f, err := ParseFailure(r.Data); err != nil || f.ID != MsgFailure1 || f.Explanation != ExplFailed || !r.Fatal {
		t.Errorf("receive first: %+v %v", r, err)
	}
	// Negotiate, then Success2 instead of receiving the challenge.
	c = mk()
	send(c, neg)
	r = send(c, AppendSuccess2(nil, &Success2{TID: 3}))
	if !r.Fatal {
		t.Errorf("success2 after negotiate: %+v", r)
	}
	// Negotiate twice restarts; the challenge carries the new T_ID.
	c = mk()
	send(c, neg)
	send(c, AppendNegotiate(nil, NewNegotiate(4, AllHashes, AllDHGroups)))
	r = recv(c, 4096)
	if ch, err := ParseChallenge(r.Data); err != nil || ch.TID != 4 {
		t.Errorf("renegotiated challenge: %v %v", ch, err)
	}
	// A second Receive while the controller waits for the Reply.
	r = recv(c, 4096)
	if f, err := ParseFailure(r.Data); err != nil || f.TID != 4 || !r.Fatal {
		t.Errorf("second receive: %+v %v", r, err)
	}
	// Unknown AUTH_TYPE, short messages: fatal.
	for _, b := range [][]byte{{2, 0, 0, 0, 3, 0}, {0, 0}, {1, 2, 0, 0, 3}, {0, 0x42, 0, 0, 3, 0, 0, 0}} {
		c = mk()
		if r := send(c, b); !r.Fatal || r.Authenticated {
			t.Errorf("message %x: %+v", b, r)
		}
	}
	// AUTH_Failure2 from the host at any point: fatal, with its reason.
	c = mk()
	send(c, neg)
	r = send(c, AppendFailure(nil, &Failure{ID: MsgFailure2, TID: 3, Reason: ReasonFailed, Explanation: ExplHashUnusable}))
	var e *Error
	if !r.Fatal || !errors.As(r.Err, &e) || !e.Remote || e.Explanation != ExplHashUnusable {
		t.Errorf("failure2: %+v", r)
	}
	// Expiry in the middle: the reply that comes late is out of sequence.
	h, c := newPair(t, HostConfig{Secret: hostSecret}, ControllerConfig{HostSecret: hostSecret})
	step := h.Start(5)
	send(c, step.Data)
	step = h.Complete(0, nil)
	r = recv(c, step.AllocLen)
	step = h.Complete(r.Status, r.Data)
	if !c.Expire() {
		t.Error("Expire reports no transaction")
	}
	r = send(c, step.Data)
	if !r.Fatal || c.Authenticated() {
		t.Errorf("reply after expiry: %+v", r)
	}
	if c.Expire() {
		t.Error("Expire after the end reports a transaction")
	}
}

// TestControllerCommandChecks checks nvmet's command field checks.
func TestControllerCommandChecks(t *testing.T) {
	c := mustController(t, ControllerConfig{HostSecret: hostSecret})
	neg := AppendNegotiate(nil, NewNegotiate(3, AllHashes, AllDHGroups))
	for _, tc := range []struct {
		name   string
		mutate func(s *nvmeof.SQE)
		xfer   uint32
		status nvmeof.Status
		offset uint16
	}{
		{"secp", func(s *nvmeof.SQE) { s.AuthCmd().SetSECP(0xEA) }, 72, nvmeof.StatusInvalidField | nvmeof.StatusDNR, 43},
		{"spsp0", func(s *nvmeof.SQE) { s.AuthCmd().SetSPSP0(0) }, 72, nvmeof.StatusInvalidField | nvmeof.StatusDNR, 41},
		{"spsp1", func(s *nvmeof.SQE) { s.AuthCmd().SetSPSP1(2) }, 72, nvmeof.StatusInvalidField | nvmeof.StatusDNR, 42},
		{"tl 0", func(s *nvmeof.SQE) { s.AuthCmd().SetLength(0) }, 0, nvmeof.StatusInvalidField | nvmeof.StatusDNR, 44},
		{"sgl length", func(s *nvmeof.SQE) {}, 71, nvmeof.StatusSGLInvalidData | nvmeof.StatusDNR, 24},
		{"not auth", func(s *nvmeof.SQE) { s.SetFCType(nvmeof.FCTypeConnect) }, 72, nvmeof.StatusInvalidOpcode | nvmeof.StatusDNR, 4},
	} {
		s := sqe(true, 72)
		tc.mutate(s)
		_, err := CheckCommand(s, tc.xfer)
		var ce *CommandError
		if !errors.As(err, &ce) || ce.Status != tc.status || ce.Offset != tc.offset || nvmeof.StatusFromError(err) != tc.status {
			t.Errorf("%s: %v", tc.name, err)
		}
		data := neg
		if tc.xfer < 72 {
			data = neg[:tc.xfer]
		}
		if r := c.Send(s, data); r.Status != tc.status || r.Fatal {
			t.Errorf("%s: Send %+v", tc.name, r)
		}
	}
	// Send given a Receive and the reverse.
	if r := c.Send(sqe(false, 72), neg); r.Status == 0 {
		t.Error("Receive SQE accepted by Send")
	}
	if r := c.Receive(sqe(true, 72), 72); r.Status == 0 {
		t.Error("Send SQE accepted by Receive")
	}
	if !RequiresAuthentication(func() *nvmeof.SQE { var s nvmeof.SQE; s.BuildKeepAlive(); return &s }()) ||
		RequiresAuthentication(sqe(true, 1)) {
		t.Error("RequiresAuthentication")
	}
}

// TestControllerAllocationLength: an AL too short for the challenge fails
// the command and keeps the step (the host may retry); too short for
// Success1 is an invalid AL.
func TestControllerAllocationLength(t *testing.T) {
	h, c := newPair(t, HostConfig{Secret: hostSecret, CtrlSecret: ctrlSecret},
		ControllerConfig{HostSecret: hostSecret, CtrlSecret: ctrlSecret, DHGroup: FFDHE2048})
	step := h.Start(1)
	c.Send(sqe(true, uint32(len(step.Data))), step.Data)
	step = h.Complete(0, nil)
	if r := c.Receive(sqe(false, 100), 100); r.Status != nvmeof.StatusInternalError || r.Data != nil {
		t.Fatalf("short AL for the challenge: %+v", r)
	}
	r := c.Receive(sqe(false, 4096), 4096)
	step = h.Complete(r.Status, r.Data)
	c.Send(sqe(true, uint32(len(step.Data))), step.Data)
	step = h.Complete(0, nil)
	if r := c.Receive(sqe(false, 16), 16); r.Status != nvmeof.StatusInvalidField|nvmeof.StatusDNR {
		t.Fatalf("short AL for Success1 with R2: %+v", r)
	}
	r = c.Receive(sqe(false, 48), 48)
	step = h.Complete(r.Status, r.Data)
	r = c.Send(sqe(true, uint32(len(step.Data))), step.Data)
	if step = h.Complete(r.Status, nil); step.Action != HostDone || step.Err != nil || !c.Authenticated() {
		t.Fatalf("end: %+v authenticated %v", step, c.Authenticated())
	}
}

// TestReauthentication runs a second transaction on an authenticated queue,
// with keys rotated on both sides, and one with the old key after the
// rotation, which fails.
func TestReauthentication(t *testing.T) {
	cc := ControllerConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, HostSecret: hostSecret, CtrlSecret: ctrlSecret,
		DHGroup: FFDHE2048, Rand: detReader("c")}
	h, c := newPair(t, HostConfig{Secret: hostSecret, CtrlSecret: ctrlSecret}, cc)
	if o := exchange(t, h, c, 1, nil); o.hostErr != nil || !o.ctrlAuth {
		t.Fatal(o.hostErr)
	}
	newKey := testSecret("rotated", HashSHA512, 64)
	cc.HostSecret = newKey
	// Keys set in the middle of a transaction apply from the next one.
	step := h.Start(2)
	c.Send(sqe(true, uint32(len(step.Data))), step.Data)
	step = h.Complete(0, nil)
	r := c.Receive(sqe(false, step.AllocLen), step.AllocLen)
	step = h.Complete(r.Status, r.Data)
	if err := c.SetConfig(cc); err != nil {
		t.Fatal(err)
	}
	for step.Action != HostDone {
		if step.Action == HostSend {
			r = c.Send(sqe(true, uint32(len(step.Data))), step.Data)
			step = h.Complete(r.Status, nil)
		} else {
			r = c.Receive(sqe(false, step.AllocLen), step.AllocLen)
			step = h.Complete(r.Status, r.Data)
		}
	}
	if step.Err != nil || !c.Authenticated() {
		t.Fatalf("transaction with keys changed in its middle: %v", step.Err)
	}
	if !c.Authenticated() {
		t.Fatal("SetConfig dropped the authentication")
	}
	// During the new transaction the queue stays authenticated.
	h2, _ := NewHost(HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: newKey, CtrlSecret: ctrlSecret, Rand: detReader("h2")})
	step = h2.Start(2)
	if r := c.Send(sqe(true, uint32(len(step.Data))), step.Data); !r.Authenticated {
		t.Error("re-negotiation dropped the authentication")
	}
	if o := exchange(t, h2, c, 3, nil); o.hostErr != nil || !o.ctrlAuth {
		t.Fatalf("with the rotated key: %v", o.hostErr)
	}
	if o := exchange(t, h, c, 4, nil); o.hostErr == nil || o.ctrlAuth || !o.fatal {
		t.Fatal("the old key still authenticates")
	}
}

func TestHostMisuse(t *testing.T) {
	if _, err := NewHost(HostConfig{HostNQN: "a", SubNQN: "b"}); err == nil {
		t.Error("host without secret")
	}
	if _, err := NewHost(HostConfig{Secret: hostSecret}); err == nil {
		t.Error("host without NQNs")
	}
	for _, hc := range []HostConfig{
		{Hashes: []Hash{HashNone}}, {DHGroups: []DHGroup{7}}, {Hashes: []Hash{}}, {DHGroups: make([]DHGroup, 31)},
	} {
		hc.Secret, hc.HostNQN, hc.SubNQN = hostSecret, "a", "b"
		if _, err := NewHost(hc); err == nil {
			t.Errorf("%+v accepted", hc)
		}
	}
	bad := []*Secret{{Hash: 4, Key: make([]byte, 32)}, {Key: make([]byte, 31)}, {Hash: HashSHA384, Key: make([]byte, 32)}}
	for _, s := range bad {
		if err := s.Validate(); !errors.Is(err, ErrInvalidSecret) {
			t.Errorf("%+v: %v", s, err)
		}
		if _, err := NewHost(HostConfig{Secret: hostSecret, CtrlSecret: s, HostNQN: "a", SubNQN: "b"}); err == nil {
			t.Errorf("host with secret %+v", s)
		}
		if _, err := NewController(ControllerConfig{HostSecret: s}); err == nil {
			t.Errorf("controller with secret %+v", s)
		}
	}
	for _, cc := range []ControllerConfig{{Hash: 4}, {DHGroup: 6}} {
		if _, err := NewController(cc); err == nil {
			t.Errorf("controller %+v", cc)
		}
		if err := mustController(t, ControllerConfig{}).SetConfig(cc); err == nil {
			t.Errorf("SetConfig %+v", cc)
		}
	}
	h, _ := NewHost(HostConfig{Secret: hostSecret, HostNQN: "a", SubNQN: "b", Rand: detReader("h")})
	if s := h.Complete(0, nil); s.Action != HostDone || s.Err == nil {
		t.Errorf("Complete without a transaction: %+v", s)
	}
	if s := h.Expire(); s.Action != HostDone || s.Err != nil {
		t.Errorf("Expire without a transaction: %+v", s)
	}
	// Command failures end the transaction with the command's status.
	h.Start(1)
	s := h.Complete(nvmeof.StatusAuthRequired|nvmeof.StatusDNR, nil)
	var e *Error
	if s.Action != HostDone || !errors.As(s.Err, &e) || e.CmdStatus != nvmeof.StatusAuthRequired|nvmeof.StatusDNR ||
		e.Status() != e.CmdStatus {
		t.Errorf("failed negotiate: %+v", s)
	}
	// A timeout ends it with ErrTimeout.
	h.Start(2)
	if s := h.Expire(); !errors.Is(s.Err, ErrTimeout) {
		t.Errorf("Expire: %v", s.Err)
	}
	// A failing random source.
	h, c := newPair(t, HostConfig{Secret: hostSecret, CtrlSecret: ctrlSecret, Rand: failingReader{}},
		ControllerConfig{HostSecret: hostSecret, DHGroup: FFDHE2048})
	if o := exchange(t, h, c, 1, nil); o.hostErr == nil {
		t.Error("host with failing randomness authenticated")
	}
	_, c = newPair(t, HostConfig{Secret: hostSecret}, ControllerConfig{HostSecret: hostSecret, Rand: failingReader{}})
	neg := AppendNegotiate(nil, NewNegotiate(1, AllHashes, AllDHGroups))
	c.Send(sqe(true, uint32(len(neg))), neg)
	if r := c.Receive(sqe(false, 4096), 4096); r.Status != nvmeof.StatusInternalError {
		t.Errorf("controller with failing randomness: %+v", r)
	}
}

// TestFailureBytes checks the AUTH_Failure1 a refused host receives says
// nothing beyond the failure: the 8-byte message, then zeros.
func TestFailureBytes(t *testing.T) {
	h, c := newPair(t, HostConfig{Secret: testSecret("x", HashNone, 32)}, ControllerConfig{HostSecret: hostSecret})
	var last []byte
	step := h.Start(6)
	for step.Action != HostDone {
		if step.Action == HostSend {
			r := c.Send(sqe(true, uint32(len(step.Data))), step.Data)
			step = h.Complete(r.Status, nil)
		} else {
			r := c.Receive(sqe(false, step.AllocLen), step.AllocLen)
			last = r.Data
			step = h.Complete(r.Status, r.Data)
		}
	}
	want := AppendFailure(nil, &Failure{ID: MsgFailure1, TID: 6, Reason: ReasonFailed, Explanation: ExplFailed})
	if !bytes.Equal(last, want) {
		t.Errorf("failure1 %x, want %x", last, want)
	}
}
