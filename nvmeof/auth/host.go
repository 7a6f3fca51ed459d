package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// HostConfig is the host's side of DH-HMAC-CHAP for one controller (the
// nvme connect options --dhchap-secret and --dhchap-ctrl-secret).
type HostConfig struct {
	HostNQN, SubNQN string
	// Secret is the host key (--dhchap-secret, -S). Required.
	Secret *Secret
	// CtrlSecret is the controller key (--dhchap-ctrl-secret, -C): with it
	// the host also authenticates the controller (bidirectional).
	CtrlSecret *Secret
	// Hashes and DHGroups are offered in AUTH_Negotiate, in order of
	// preference; nil for AllHashes and AllDHGroups (what Linux offers).
	// The host refuses a challenge with a hash or group it did not offer.
	Hashes   []Hash
	DHGroups []DHGroup
	// Rand supplies challenges, sequence numbers and DH keys; nil for
	// crypto/rand.
	Rand io.Reader
}

// HostAction is what the host must do next.
type HostAction uint8

// Host actions.
const (
	// HostSend: submit an Authentication Send (nvmeof.SQE.BuildAuthSend)
	// carrying Data, then call Host.Complete with its status.
	HostSend HostAction = iota + 1
	// HostReceive: submit an Authentication Receive with allocation length
	// AllocLen (nvmeof.SQE.BuildAuthReceive), then call Host.Complete with
	// its status and the data received.
	HostReceive
	// HostDone: the transaction is over; Err is nil when the queue is
	// authenticated, else an *Error.
	HostDone
)

// HostStep is the next thing the host does.
type HostStep struct {
	Action   HostAction
	Data     []byte // HostSend: the message
	AllocLen uint32 // HostReceive: AL
	Err      error  // HostDone: nil on success, else *Error
}

// host transaction states: the command outstanding.
type hostState uint8

const (
	hostIdle hostState = iota
	hostSentNegotiate
	hostRecvChallenge
	hostSentReply
	hostRecvSuccess1
	hostSentSuccess2
	hostSentFailure2
)

// Host is the host side of DH-HMAC-CHAP for one queue (Linux
// drivers/nvme/host/auth.c nvme_queue_auth_work): it runs one transaction
// per Start, negotiate → challenge → reply → success1 → [success2], after
// the queue's Connect answered ATR (admin queue and every I/O queue) and
// whenever the host re-authenticates. It is a pure state machine: the
// caller submits the commands it asks for and feeds back their
// completions; command timeouts are the caller's, reported with Expire. A
// Host is not safe for concurrent use.
type Host struct {
	cfg     HostConfig
	hostKey []byte // TransformKey(Secret, HostNQN)
	ctrlKey []byte // TransformKey(CtrlSecret, SubNQN), nil for unidirectional

	state hostState
	tid   uint16
	err   *Error // the failure AUTH_Failure2 reports

	hash   Hash
	group  DHGroup
	s1, s2 uint32
	c1, c2 []byte
	z      []byte
	dh     bool
	r1     []byte
}

// NewHost checks the configuration and returns a host with no transaction.
func NewHost(cfg HostConfig) (*Host, error) {
	if cfg.Secret == nil {
		return nil, errors.New("auth: host: no host secret")
	}
	for _, s := range []*Secret{cfg.Secret, cfg.CtrlSecret} {
		if s != nil {
			if err := s.Validate(); err != nil {
				return nil, err
			}
		}
	}
	if cfg.HostNQN == "" || cfg.SubNQN == "" {
		return nil, errors.New("auth: host: host NQN and subsystem NQN are needed")
	}
	if cfg.Hashes == nil {
		cfg.Hashes = AllHashes
	}
	if cfg.DHGroups == nil {
		cfg.DHGroups = AllDHGroups
	}
	if len(cfg.Hashes) == 0 || len(cfg.Hashes) > MaxHashIDs || len(cfg.DHGroups) == 0 || len(cfg.DHGroups) > MaxDHGroupIDs {
		return nil, fmt.Errorf("auth: host: %d hashes and %d DH groups offered, want 1..30 each", len(cfg.Hashes), len(cfg.DHGroups))
	}
	for _, h := range cfg.Hashes {
		if !h.Valid() {
			return nil, fmt.Errorf("auth: host: cannot offer %v", h)
		}
	}
	for _, g := range cfg.DHGroups {
		if !g.Valid() {
			return nil, fmt.Errorf("auth: host: cannot offer %v", g)
		}
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	h := &Host{cfg: cfg, hostKey: TransformKey(cfg.Secret, cfg.HostNQN)}
	if cfg.CtrlSecret != nil {
		h.ctrlKey = TransformKey(cfg.CtrlSecret, cfg.SubNQN)
	}
	return h, nil
}

// Negotiated returns the hash and DH group of the last transaction.
func (h *Host) Negotiated() (Hash, DHGroup) { return h.hash, h.group }

// Start begins a transaction with identifier tid (Linux numbers them per
// controller, across its queues) and returns its first step, sending
// AUTH_Negotiate. A transaction in progress is abandoned.
func (h *Host) Start(tid uint16) HostStep {
	h.reset()
	h.tid = tid
	h.state = hostSentNegotiate
	return HostStep{Action: HostSend, Data: AppendNegotiate(nil, NewNegotiate(tid, h.cfg.Hashes, h.cfg.DHGroups))}
}

// Complete feeds back the completion of the command the last step asked
// for: its NVMe status and, for an Authentication Receive, the data
// received (up to AL bytes).
func (h *Host) Complete(status nvmeof.Status, data []byte) HostStep {
	st := h.state
	if st == hostIdle {
		return h.done(&Error{Detail: "no authentication command outstanding"})
	}
	if st == hostSentFailure2 {
		return h.done(h.err)
	}
	msg := map[hostState]MessageID{hostSentNegotiate: MsgNegotiate, hostRecvChallenge: MsgChallenge,
		hostSentReply: MsgReply, hostRecvSuccess1: MsgSuccess1, hostSentSuccess2: MsgSuccess2}[st]
	if status != nvmeof.StatusSuccess {
		e := &Error{Message: msg, CmdStatus: status}
		if st == hostSentReply {
			// Linux sends AUTH_Failure2 when the Reply fails.
			return h.failure2(e)
		}
		return h.done(e)
	}
	switch st {
	case hostSentNegotiate:
		h.state = hostRecvChallenge
		return HostStep{Action: HostReceive, AllocLen: ReceiveBufferSize}
	case hostRecvChallenge:
		if e := h.validate(data, MsgChallenge); e != nil {
			return h.reject(e)
		}
		reply, e := h.challenge(data)
		if e != nil {
			return h.failure2(e)
		}
		h.state = hostSentReply
		return HostStep{Action: HostSend, Data: reply}
	case hostSentReply:
		h.state = hostRecvSuccess1
		return HostStep{Action: HostReceive, AllocLen: ReceiveBufferSize}
	case hostRecvSuccess1:
		if e := h.validate(data, MsgSuccess1); e != nil {
			return h.reject(e)
		}
		if e := h.success1(data); e != nil {
			return h.failure2(e)
		}
		if h.s2 == 0 {
			return h.done(nil)
		}
		h.state = hostSentSuccess2
		return HostStep{Action: HostSend, Data: AppendSuccess2(nil, &Success2{TID: h.tid})}
	}
	return h.done(nil) // hostSentSuccess2
}

// Expire ends the transaction in progress because a command of it timed
// out: no AUTH_Failure2 is sent (the caller tears the queue down).
func (h *Host) Expire() HostStep {
	if h.state == hostIdle {
		return HostStep{Action: HostDone}
	}
	return h.done(&Error{Detail: "command timed out", Err: ErrTimeout})
}

// validate checks the header of a received message
// (nvme_auth_receive_validate): AUTH_Failure1 ends the transaction with the
// controller's explanation, anything but the expected message with
// "incorrect protocol message".
func (h *Host) validate(data []byte, want MessageID) *Error {
	hd, err := ParseHeader(data)
	if err != nil {
		return &Error{Message: want, Explanation: ExplIncorrectMessage, Err: err}
	}
	if hd.Type == TypeCommon && hd.ID == MsgFailure1 {
		e := &Error{Message: want, Remote: true}
		f, err := ParseFailure(data)
		if err != nil {
			e.Remote, e.Explanation, e.Err = false, ExplIncorrectMessage, err
		} else {
			e.Explanation = f.Explanation
		}
		return e
	}
	if hd.Type != TypeDHCHAP || hd.ID != want {
		return &Error{Message: want, Explanation: ExplIncorrectMessage,
			Detail: fmt.Sprintf("received AUTH_TYPE %#02x AUTH_ID %#02x", uint8(hd.Type), uint8(hd.ID))}
	}
	if hd.TID != h.tid {
		return &Error{Message: want, Explanation: ExplIncorrectMessage, Detail: fmt.Sprintf("transaction %d, want %d", hd.TID, h.tid)}
	}
	return nil
}

// challenge processes the DH-HMAC-CHAP_Challenge and makes the Reply
// (nvme_auth_process_dhchap_challenge, nvme_auth_dhchap_exponential,
// nvme_auth_dhchap_setup_host_response, nvme_auth_set_dhchap_reply_data).
func (h *Host) challenge(data []byte) ([]byte, *Error) {
	fail := func(expl Explanation, err error, format string, args ...any) *Error {
		return &Error{Message: MsgChallenge, Explanation: expl, Detail: fmt.Sprintf(format, args...), Err: err}
	}
	m, err := ParseChallenge(data)
	if err != nil {
		return nil, fail(ExplIncorrectPayload, err, "malformed")
	}
	if !m.Hash.Valid() || !slices.Contains(h.cfg.Hashes, m.Hash) {
		return nil, fail(ExplHashUnusable, nil, "hash %v not offered", m.Hash)
	}
	if len(m.C) != m.Hash.Size() {
		return nil, fail(ExplHashUnusable, nil, "HL %d for %v", len(m.C), m.Hash)
	}
	if !m.DHGroup.Valid() || !slices.Contains(h.cfg.DHGroups, m.DHGroup) {
		return nil, fail(ExplDHGroupUnusable, nil, "DH group %v not offered", m.DHGroup)
	}
	if m.DHGroup != DHGroupNull && len(m.DHValue) == 0 {
		return nil, fail(ExplDHGroupUnusable, nil, "empty DH value for %v", m.DHGroup)
	}
	if m.DHGroup == DHGroupNull && len(m.DHValue) != 0 {
		return nil, fail(ExplIncorrectPayload, nil, "DH value for the NULL DH group")
	}
	h.hash, h.group, h.s1, h.c1 = m.Hash, m.DHGroup, m.Seqnum, slices.Clone(m.C)
	hl := m.Hash.Size()
	r := h.cfg.Rand
	reply := &Reply{TID: h.tid}
	if m.DHGroup != DHGroupNull {
		key, err := GenerateDHKey(m.DHGroup, r)
		if err != nil {
			return nil, fail(ExplFailed, err, "DH key")
		}
		if h.z, err = key.SharedSecret(m.DHValue); err != nil {
			return nil, fail(ExplIncorrectPayload, err, "controller's DH value")
		}
		h.dh = true
		reply.DHValue = key.PublicValue()
	}
	h.r1 = HostResponse(h.hash, h.hostKey, h.challengeValue(h.c1), h.s1, h.tid, h.cfg.HostNQN, h.cfg.SubNQN)
	reply.R = h.r1
	if h.ctrlKey != nil {
		h.c2 = make([]byte, hl)
		if _, err := io.ReadFull(r, h.c2); err != nil {
			return nil, fail(ExplFailed, err, "challenge C2")
		}
		if h.s2, err = seqnum(r); err != nil {
			return nil, fail(ExplFailed, err, "sequence number")
		}
		reply.CValid, reply.C, reply.Seqnum = true, h.c2, h.s2
	}
	return AppendReply(nil, reply), nil
}

// success1 checks DH-HMAC-CHAP_Success1 and, for bidirectional
// authentication, the controller's response R2
// (nvme_auth_process_dhchap_success1).
func (h *Host) success1(data []byte) *Error {
	m, err := ParseSuccess1(data)
	if err != nil {
		return &Error{Message: MsgSuccess1, Explanation: ExplIncorrectPayload, Err: err}
	}
	if int(m.HL) != h.hash.Size() {
		return &Error{Message: MsgSuccess1, Explanation: ExplHashUnusable, Detail: fmt.Sprintf("HL %d, want %d", m.HL, h.hash.Size())}
	}
	if h.s2 == 0 {
		return nil
	}
	// Linux accepts a Success1 without R2 even after asking for one; a host
	// that asked to authenticate the controller must not.
	if !m.RValid {
		return &Error{Message: MsgSuccess1, Explanation: ExplFailed, Detail: "controller did not answer the host's challenge"}
	}
	want := ControllerResponse(h.hash, h.ctrlKey, h.challengeValue(h.c2), h.s2, h.tid, h.cfg.SubNQN, h.cfg.HostNQN)
	if !hmac.Equal(want, m.R) {
		return &Error{Message: MsgSuccess1, Explanation: ExplFailed, Detail: "controller authentication failed: response mismatch"}
	}
	return nil
}

func (h *Host) challengeValue(c []byte) []byte {
	if !h.dh {
		return c
	}
	return AugmentedChallenge(h.hash, h.z, c)
}

// failure2 sends AUTH_Failure2 reporting e; the transaction ends with e when
// the command completes, whatever its status.
func (h *Host) failure2(e *Error) HostStep {
	h.err = e
	h.state = hostSentFailure2
	expl := e.Explanation
	if expl == 0 {
		expl = ExplFailed
	}
	return HostStep{Action: HostSend, Data: AppendFailure(nil, &Failure{ID: MsgFailure2, TID: h.tid, Reason: ReasonFailed, Explanation: expl})}
}

// reject ends the transaction after a wrong message: AUTH_Failure1 ends it
// at once; anything else is answered with AUTH_Failure2 (Linux just stops,
// leaving the controller to its timer; nvmet tears the controller down on
// the AUTH_Failure2).
func (h *Host) reject(e *Error) HostStep {
	if e.Remote {
		return h.done(e)
	}
	return h.failure2(e)
}

func (h *Host) done(e *Error) HostStep {
	h.reset()
	if e == nil {
		return HostStep{Action: HostDone}
	}
	return HostStep{Action: HostDone, Err: e}
}

// reset drops the transaction's secrets (nvme_auth_reset_dhchap).
func (h *Host) reset() {
	clear(h.z)
	h.state, h.err = hostIdle, nil
	h.s1, h.s2, h.c1, h.c2, h.z, h.dh, h.r1 = 0, 0, nil, nil, nil, false, nil
}
