package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// DefaultTimeout is how long a controller waits for the next message of a
// transaction when the association has no keep-alive timeout (nvmet
// auth_expire_secs: KATO, else 120 s).
const DefaultTimeout = 120 * time.Second

// ControllerConfig is what a controller knows of one host: nvmet's
// per-host dhchap_key, dhchap_ctrl_key, dhchap_hash and dhchap_dhgroup.
type ControllerConfig struct {
	SubNQN, HostNQN string
	// HostSecret is the host's key (dhchap_key). Without one every
	// DH-HMAC-CHAP_Reply fails (nvmet "no host key").
	HostSecret *Secret
	// CtrlSecret is the controller's key (dhchap_ctrl_key), needed when the
	// host asks for controller (bidirectional) authentication.
	CtrlSecret *Secret
	// Hash is the preferred hash (dhchap_hash): used when the host offers
	// it, else the first usable one the host offers. 0 means SHA-256,
	// nvmet's default.
	Hash Hash
	// DHGroup is the DH group (dhchap_dhgroup; default NULL); a host that
	// does not offer it is refused with "DH group not usable".
	DHGroup DHGroup
	// Timeout bounds the wait for the host's next message of a transaction:
	// the association's KATO, 0 for DefaultTimeout.
	Timeout time.Duration
	// Rand supplies challenges, sequence numbers and DH keys; nil for
	// crypto/rand.
	Rand io.Reader
}

// TimerAction tells the caller what to do with a queue's authentication
// timer after a command; when it fires the caller calls Expire.
type TimerAction uint8

// Timer actions.
const (
	TimerKeep TimerAction = iota // leave the timer as it is
	TimerArm                     // (re)start the timer for Result.Timeout
	TimerStop                    // stop the timer
)

// Result is what the controller does with an Authentication Send or
// Receive command.
type Result struct {
	// Status completes the command.
	Status nvmeof.Status
	// Data is the message an Authentication Receive returns; the
	// transfer is AL bytes, the rest zero (nvmet sends a zeroed AL-byte
	// buffer).
	Data []byte
	// Timer and Timeout: what to do with the queue's transaction timer.
	Timer   TimerAction
	Timeout time.Duration
	// Fatal asks the caller to tear the controller down after completing
	// the command, as nvmet_ctrl_fatal_error after AUTH_Failure1 is sent
	// or AUTH_Failure2 received (the host then sees the association lost).
	Fatal bool
	// Authenticated is the queue's state after the command.
	Authenticated bool
	// Err says why the command or the transaction failed (a *CommandError
	// or an *Error), for the log; nil otherwise.
	Err error
}

// Controller is the controller (target) side of DH-HMAC-CHAP for one queue
// (nvmet's struct nvmet_sq dhchap_* state; drivers/nvme/target/
// fabrics-cmd-auth.c and auth.c). It runs any number of transactions: the
// first after the queue's Connect (admin queue and every I/O queue alike,
// when Connect answered ATR), and re-authentications when the host sends a
// new AUTH_Negotiate. It is a pure state machine: the caller feeds it the
// queue's Authentication Send and Receive commands and timer expiries and
// carries out the Result. A Controller is not safe for concurrent use.
type Controller struct {
	cfg     ControllerConfig
	pending *ControllerConfig // SetConfig's, applied at the next AUTH_Negotiate
	hostKey []byte            // TransformKey(HostSecret, HostNQN)
	ctrlKey []byte            // TransformKey(CtrlSecret, SubNQN)

	step          MessageID // the message expected next (nvmet dhchap_step)
	tid           int32     // transaction ID, -1 for none
	status        Explanation
	authenticated bool

	// The transaction in progress.
	hash   Hash
	group  DHGroup
	s1, s2 uint32
	c1, c2 []byte
	dh     *DHKey
	z      []byte // DH shared secret
	failed *Error // the failure AUTH_Failure1 will report
}

// NewController returns the authentication state of a new queue, not
// authenticated. It fails on an invalid secret, hash or DH group.
func NewController(cfg ControllerConfig) (*Controller, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	c := &Controller{step: MsgNegotiate, tid: -1}
	c.apply(cfg)
	return c, nil
}

func (cfg *ControllerConfig) check() error {
	for _, s := range []*Secret{cfg.HostSecret, cfg.CtrlSecret} {
		if s != nil {
			if err := s.Validate(); err != nil {
				return err
			}
		}
	}
	if cfg.Hash != HashNone && !cfg.Hash.Valid() {
		return fmt.Errorf("auth: controller: invalid hash %v", cfg.Hash)
	}
	if !cfg.DHGroup.Valid() {
		return fmt.Errorf("auth: controller: invalid DH group %v", cfg.DHGroup)
	}
	return nil
}

// SetConfig replaces the keys and preferences; they apply from the next
// AUTH_Negotiate, and the queue stays authenticated meanwhile (nvmet
// re-reads the host's keys when the admin queue re-authenticates; keys
// rotated by a reload do not drop authenticated queues).
func (c *Controller) SetConfig(cfg ControllerConfig) error {
	if err := cfg.check(); err != nil {
		return err
	}
	c.pending = &cfg
	return nil
}

func (c *Controller) apply(cfg ControllerConfig) {
	if cfg.Hash == HashNone {
		cfg.Hash = HashSHA256
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	c.cfg = cfg
	c.hostKey, c.ctrlKey = nil, nil
	if cfg.HostSecret != nil {
		c.hostKey = TransformKey(cfg.HostSecret, cfg.HostNQN)
	}
	if cfg.CtrlSecret != nil {
		c.ctrlKey = TransformKey(cfg.CtrlSecret, cfg.SubNQN)
	}
}

// Authenticated reports whether the queue is authenticated: it may carry
// commands other than Fabrics commands (see RequiresAuthentication).
func (c *Controller) Authenticated() bool { return c.authenticated }

// Negotiated returns the hash and DH group of the last transaction.
func (c *Controller) Negotiated() (Hash, DHGroup) { return c.hash, c.group }

// Send handles an Authentication Send command s carrying data (the
// host-to-controller messages AUTH_Negotiate, DH-HMAC-CHAP_Reply,
// DH-HMAC-CHAP_Success2, AUTH_Failure2), as nvmet_execute_auth_send.
func (c *Controller) Send(s *nvmeof.SQE, data []byte) Result {
	if _, err := CheckCommand(s, uint32(len(data))); err != nil {
		return c.result(Result{Status: nvmeof.StatusFromError(err), Err: err})
	}
	if s.FCType() != nvmeof.FCTypeAuthSend {
		err := &CommandError{Status: nvmeof.StatusInvalidOpcode | nvmeof.StatusDNR, Offset: 4, Reason: "Authentication Receive given to Send"}
		return c.result(Result{Status: err.Status, Err: err})
	}
	if c.step == MsgFailure1 && c.failed != nil {
		// The transaction has failed and AUTH_Failure1 waits for the host,
		// after which the association ends (nvmet_ctrl_fatal_error once
		// AUTH_Failure1 is sent). Nothing the host sends now starts over: a new
		// AUTH_Negotiate would wipe the failure and let a peer guess
		// without end on one controller.
		e := *c.failed
		return c.finish(Result{Status: nvmeof.StatusCommandSequenceError | nvmeof.StatusDNR, Fatal: true, Err: &e})
	}
	h, err := ParseHeader(data)
	if err != nil {
		return c.abort(MsgNegotiate, ExplIncorrectMessage, err.Error())
	}
	switch h.Type {
	case TypeCommon:
		switch h.ID {
		case MsgNegotiate:
			// A new transaction, also on an authenticated queue
			// (re-authentication): nvmet restarts at NEGOTIATE.
			c.reset()
			c.step = MsgNegotiate
			if c.pending != nil {
				c.apply(*c.pending)
				c.pending = nil
			}
			if expl, detail := c.negotiate(data); expl != 0 {
				c.fail(MsgNegotiate, expl, detail)
			} else {
				c.step = MsgChallenge
			}
			return c.armed(Result{})
		case MsgFailure2:
			// The host gives up (it found our challenge or Success1 wrong).
			// nvmet answers this message with a fatal error too.
			e := &Error{Message: MsgFailure2, Remote: true, Detail: "host sent AUTH_Failure2"}
			if f, err := ParseFailure(data); err == nil {
				e.Explanation = f.Explanation
			}
			return c.finish(Result{Fatal: true, Err: e})
		}
		return c.abort(h.ID, ExplIncorrectMessage, fmt.Sprintf("unexpected %v while waiting for %v", h.ID, c.step))
	case TypeDHCHAP:
	default:
		return c.abort(h.ID, ExplIncorrectMessage, fmt.Sprintf("AUTH_TYPE %#02x", uint8(h.Type)))
	}
	if h.ID != c.step || (h.ID != MsgReply && h.ID != MsgSuccess2) {
		return c.abort(h.ID, ExplIncorrectMessage, fmt.Sprintf("unexpected %v while waiting for %v", h.ID, c.step))
	}
	if int32(h.TID) != c.tid {
		c.fail(h.ID, ExplIncorrectPayload, fmt.Sprintf("transaction %d, want %d", h.TID, c.tid))
		return c.armed(Result{})
	}
	if h.ID == MsgReply {
		if expl, detail := c.reply(data); expl != 0 {
			c.fail(MsgReply, expl, detail)
		} else {
			c.step = MsgSuccess1
		}
		return c.armed(Result{})
	}
	// DH-HMAC-CHAP_Success2: the host accepted our response R2.
	if _, err := ParseSuccess2(data); err != nil {
		c.fail(MsgSuccess2, ExplIncorrectPayload, err.Error())
		return c.armed(Result{})
	}
	c.authenticated = true
	return c.finish(Result{})
}

// Receive handles an Authentication Receive command s whose data SGL is
// xferLen bytes long, as nvmet_execute_auth_receive: Result.Data is the
// DH-HMAC-CHAP_Challenge, DH-HMAC-CHAP_Success1 or AUTH_Failure1 to return.
func (c *Controller) Receive(s *nvmeof.SQE, xferLen uint32) Result {
	al, err := CheckCommand(s, xferLen)
	if err != nil {
		return c.result(Result{Status: nvmeof.StatusFromError(err), Err: err})
	}
	if s.FCType() != nvmeof.FCTypeAuthReceive {
		err := &CommandError{Status: nvmeof.StatusInvalidOpcode | nvmeof.StatusDNR, Offset: 4, Reason: "Authentication Send given to Receive"}
		return c.result(Result{Status: err.Status, Err: err})
	}
	// nvmet_auth_receive_data_len: an allocation length too short for the
	// fixed part of the answer is an invalid AL.
	minLen := uint32(FailureSize)
	switch c.step {
	case MsgChallenge:
		minLen = 1
	case MsgSuccess1:
		minLen = Success1HeaderSize
		if c.c2 != nil {
			minLen += uint32(c.hash.Size())
		}
	}
	if al < minLen {
		err := &CommandError{Status: nvmeof.StatusInvalidField | nvmeof.StatusDNR, Offset: nvmeof.AuthSQEOffTL,
			Reason: fmt.Sprintf("allocation length %d, need %d", al, minLen)}
		return c.result(Result{Status: err.Status, Err: err})
	}
	switch c.step {
	case MsgChallenge:
		msg, err := c.challenge()
		if err != nil {
			return c.result(Result{Status: nvmeof.StatusInternalError, Err: err})
		}
		if uint32(len(msg)) > al {
			// nvmet means to fail the command (NVME_SC_INTERNAL) and keep
			// the step, so the host can retry with a larger buffer.
			c.c1, c.dh = nil, nil
			err := &CommandError{Status: nvmeof.StatusInternalError, Offset: nvmeof.AuthSQEOffTL,
				Reason: fmt.Sprintf("allocation length %d, challenge needs %d", al, len(msg))}
			return c.result(Result{Status: err.Status, Err: err})
		}
		c.step = MsgReply
		return c.result(Result{Data: msg})
	case MsgSuccess1:
		m := &Success1{TID: uint16(c.tid), HL: uint8(c.hash.Size())}
		if c.c2 != nil {
			if c.ctrlKey == nil {
				c.fail(MsgSuccess1, ExplFailed, "host asks for controller authentication, no controller key")
				return c.failure1()
			}
			m.RValid = true
			m.R = ControllerResponse(c.hash, c.ctrlKey, c.challengeValue(c.c2), c.s2, uint16(c.tid), c.cfg.SubNQN, c.cfg.HostNQN)
		}
		c.step = MsgSuccess2
		return c.finish(Result{Data: AppendSuccess1(nil, m)})
	case MsgFailure1:
		return c.failure1()
	}
	c.fail(c.step, ExplFailed, fmt.Sprintf("Authentication Receive while waiting for %v", c.step))
	return c.failure1()
}

// Failed returns the failure of the transaction that AUTH_Failure1 will
// report, while the host has not fetched it; nil otherwise.
func (c *Controller) Failed() error {
	if c.step == MsgFailure1 && c.failed != nil {
		return c.failed
	}
	return nil
}

// NeedsDH reports whether the next Authentication Send (send) or Receive
// runs a Diffie-Hellman exponentiation: the key pair of the
// DH-HMAC-CHAP_Challenge, or the shared secret of a DH-HMAC-CHAP_Reply.
// These are the costly steps a peer can make the controller run without
// holding a key; the caller may bound how many run at once.
func (c *Controller) NeedsDH(send bool) bool {
	if send {
		return c.step == MsgReply && c.dh != nil
	}
	return c.step == MsgChallenge && c.group != DHGroupNull
}

// Expire ends the transaction in progress when the queue's timer fires
// (nvmet_auth_expired_work): the next message must be a new
// AUTH_Negotiate. The queue keeps its authentication state. It reports
// whether a transaction was in progress.
func (c *Controller) Expire() bool {
	busy := c.step != MsgNegotiate && c.step != MsgSuccess2 && c.step != MsgFailure2
	c.reset()
	c.step, c.tid, c.failed = MsgNegotiate, -1, nil
	return busy
}

// negotiate checks an AUTH_Negotiate and selects the hash and DH group
// (nvmet_auth_negotiate).
func (c *Controller) negotiate(data []byte) (Explanation, string) {
	h, _ := ParseHeader(data)
	c.tid = int32(h.TID)
	if len(data) < NegotiateSize {
		return ExplIncorrectPayload, fmt.Sprintf("%d bytes, need %d", len(data), NegotiateSize)
	}
	if data[6] != SCCNone {
		return ExplConcatMismatch, fmt.Sprintf("secure channel concatenation %d requested; NVMe/RDMA has none", data[6])
	}
	if data[7] != 1 {
		return ExplHashUnusable, fmt.Sprintf("%d protocol descriptors, want 1", data[7])
	}
	m, err := ParseNegotiate(data)
	if err != nil {
		return ExplIncorrectPayload, err.Error()
	}
	p := m.Protocols[0]
	if p.AuthID != AuthIDDHCHAP {
		return ExplIncorrectPayload, fmt.Sprintf("AUTHID %#02x, want DH-HMAC-CHAP", p.AuthID)
	}
	// The configured hash if offered, else the first usable one offered.
	c.hash = 0
	for _, x := range p.Hashes {
		if x == c.cfg.Hash {
			c.hash = x
			break
		}
		if c.hash == 0 && x.Valid() {
			c.hash = x
		}
	}
	if c.hash == 0 {
		return ExplHashUnusable, fmt.Sprintf("no usable hash among %v", p.Hashes)
	}
	// The configured group, which the host must offer. nvmet's loop keeps
	// the configured group whatever the host offers (a Linux host offers
	// every group and takes any); a host that does not offer it would not
	// accept it, and falling back to another would let a host downgrade to
	// the NULL group.
	if !slices.Contains(p.DHGroups, c.cfg.DHGroup) {
		return ExplDHGroupUnusable, fmt.Sprintf("host offers DH groups %v, not %v", p.DHGroups, c.cfg.DHGroup)
	}
	c.group = c.cfg.DHGroup
	return 0, ""
}

// challenge makes the DH-HMAC-CHAP_Challenge (nvmet_auth_challenge).
func (c *Controller) challenge() ([]byte, error) {
	r := c.cfg.Rand
	c.c1 = make([]byte, c.hash.Size())
	if _, err := io.ReadFull(r, c.c1); err != nil {
		return nil, fmt.Errorf("auth: challenge: %w", err)
	}
	s1, err := seqnum(r)
	if err != nil {
		return nil, err
	}
	c.s1 = s1
	m := &Challenge{TID: uint16(c.tid), Hash: c.hash, DHGroup: c.group, Seqnum: c.s1, C: c.c1}
	if c.group != DHGroupNull {
		if c.dh, err = GenerateDHKey(c.group, r); err != nil {
			return nil, err
		}
		m.DHValue = c.dh.PublicValue()
	}
	return AppendChallenge(nil, m), nil
}

// reply checks the host's DH-HMAC-CHAP_Reply (nvmet_auth_reply).
func (c *Controller) reply(data []byte) (Explanation, string) {
	m, err := ParseReply(data)
	if err != nil {
		return ExplIncorrectPayload, err.Error()
	}
	if len(m.R) != c.hash.Size() {
		// nvmet_auth_host_hash fails on the length: "failed".
		return ExplFailed, fmt.Sprintf("HL %d, want %d", len(m.R), c.hash.Size())
	}
	switch {
	case len(m.DHValue) != 0 && c.dh == nil:
		return ExplIncorrectPayload, "DH value with the NULL DH group"
	case len(m.DHValue) == 0 && c.dh != nil:
		return ExplIncorrectPayload, fmt.Sprintf("no DH value for %v", c.group)
	case c.dh != nil:
		if c.z, err = c.dh.SharedSecret(m.DHValue); err != nil {
			return ExplDHGroupUnusable, err.Error()
		}
	}
	if c.hostKey == nil {
		return ExplFailed, "no host key"
	}
	want := HostResponse(c.hash, c.hostKey, c.challengeValue(c.c1), c.s1, uint16(c.tid), c.cfg.HostNQN, c.cfg.SubNQN)
	if !hmac.Equal(want, m.R) {
		return ExplFailed, "host response mismatch"
	}
	c.s2 = m.Seqnum
	if m.CValid && c.s2 != 0 {
		// Controller authentication: the queue is authenticated when the
		// host accepts R2 (DH-HMAC-CHAP_Success2).
		c.c2 = slices.Clone(m.C)
	} else {
		// SEQNUM 0: no controller authentication (NVMe Base 2.2 §8.3.4.5.4).
		c.c2 = nil
		c.authenticated = true
	}
	return 0, ""
}

// challengeValue returns the challenge the responses are computed over:
// augmented with the session key when a DH group is used.
func (c *Controller) challengeValue(ch []byte) []byte {
	if c.dh == nil {
		return ch
	}
	return AugmentedChallenge(c.hash, c.z, ch)
}

// fail moves to FAILURE1: the host's next Authentication Receive gets an
// AUTH_Failure1 with expl.
func (c *Controller) fail(msg MessageID, expl Explanation, detail string) {
	c.step, c.status = MsgFailure1, expl
	c.failed = &Error{Message: msg, Explanation: expl, Detail: detail}
}

// failure1 returns the AUTH_Failure1 and ends the transaction: the queue is
// unauthenticated and the controller torn down.
func (c *Controller) failure1() Result {
	msg := AppendFailure(nil, &Failure{ID: MsgFailure1, TID: uint16(c.tid), Reason: ReasonFailed, Explanation: c.status})
	e := c.failed
	if e == nil {
		e = &Error{Message: MsgFailure1, Explanation: c.status}
	}
	c.step = MsgFailure1
	return c.finish(Result{Data: msg, Fatal: true, Err: e})
}

// abort is nvmet's done_failure1: a message out of sequence ends the
// transaction at once (step FAILURE2) and tears the controller down.
func (c *Controller) abort(msg MessageID, expl Explanation, detail string) Result {
	c.step, c.status = MsgFailure2, expl
	return c.finish(Result{Fatal: true, Err: &Error{Message: msg, Explanation: expl, Detail: detail}})
}

// finish ends a transaction: secrets dropped, timer stopped.
func (c *Controller) finish(r Result) Result {
	if r.Fatal {
		c.authenticated = false
		if c.step != MsgFailure1 {
			c.step = MsgFailure2
		}
	}
	c.reset()
	r.Timer = TimerStop
	return c.result(r)
}

// armed restarts the transaction timer (nvmet mod_delayed_work after every
// Authentication Send that leaves the transaction open).
func (c *Controller) armed(r Result) Result {
	r.Timer, r.Timeout = TimerArm, c.cfg.Timeout
	return c.result(r)
}

func (c *Controller) result(r Result) Result {
	r.Authenticated = c.authenticated
	if r.Err == nil && c.failed != nil && c.step == MsgFailure1 {
		r.Err = c.failed
	}
	return r
}

// reset drops the transaction's secrets (nvmet_auth_sq_free).
func (c *Controller) reset() {
	clear(c.z)
	c.s1, c.s2, c.c1, c.c2, c.dh, c.z = 0, 0, nil, nil, nil, nil
	if c.step != MsgFailure1 {
		c.failed = nil
	}
}

// seqnum returns a random non-zero sequence number (Linux
// nvme_auth_get_seqnum starts at a random value and skips 0).
func seqnum(r io.Reader) (uint32, error) {
	var b [4]byte
	for {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, fmt.Errorf("auth: sequence number: %w", err)
		}
		if v := binary.LittleEndian.Uint32(b[:]); v != 0 {
			return v, nil
		}
	}
}
