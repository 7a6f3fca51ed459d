package iwarp

import (
	"fmt"

	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// negotiated is the outcome of the MPA exchange for one side.
type negotiated struct {
	crc      bool
	enhanced bool
	ird, ord int      // local inbound / outbound RDMA Read depth
	p2p      bool     // RFC 6581 peer-to-peer mode in effect
	rtr      wire.RTR // the RTR message the initiator sends (p2p)
}

// mpaError is a failure of the MPA exchange. cause is set when RFC 6581 §7
// or siw answers it with a Terminate before closing; reject is set when the
// responder answers with a Reject reply.
type mpaError struct {
	msg    string
	cause  wire.Cause
	term   bool
	reject bool
}

func (e *mpaError) Error() string { return "mpa: " + e.msg }

// buildRequest makes the initiator's request frame.
func buildRequest(cfg *Config, ird, ord int, pd []byte) wire.MPAFrame {
	f := wire.MPAFrame{
		Revision:    cfg.MPARevision,
		CRC:         cfg.CRC != CRCOff,
		PrivateData: pd,
	}
	if cfg.MPARevision >= 2 {
		f.Enhanced = true
		f.IRD, f.ORD = uint16(ird), uint16(ord)
		if cfg.PeerToPeer {
			f.P2P = true
			f.RTR = wire.RTRWrite | wire.RTRRead
			// A Read RTR is a real (zero-length) RDMA Read: it needs ORD ≥ 1.
			f.ORD = max(f.ORD, 1)
		}
	}
	return f
}

// checkRequest judges a received request before the ULP sees it. A nil
// error means the ULP may accept or reject it; an error with reject set
// means the responder must send a Reject reply and close; other errors mean
// closing without a reply (siw drops such connections).
func checkRequest(req *wire.MPAFrame) error {
	switch {
	case req.Reply:
		return &mpaError{msg: "reply key in a request"}
	case req.Revision > 2:
		return &mpaError{msg: fmt.Sprintf("revision %d not supported", req.Revision)}
	case req.Markers:
		// siw never supports markers and rejects such requests.
		return &mpaError{msg: "markers requested; not supported", reject: true}
	case req.Reject:
		return &mpaError{msg: "reject flag in a request"}
	}
	return nil
}

// respond computes the responder's reply to an accepted request and its
// own settings. wantIRD/wantORD are the ULP's wishes; limit caps both.
// Rules follow siw with relaxed IRD negotiation: ORD may not exceed the
// peer's IRD; IRD is raised to the peer's ORD so its reads never overflow.
func respond(cfg *Config, req *wire.MPAFrame, wantIRD, wantORD, limit int, pd []byte) (wire.MPAFrame, negotiated) {
	rep := wire.MPAFrame{
		Reply:       true,
		Revision:    max(req.Revision, 1),
		Enhanced:    req.Enhanced,
		CRC:         req.CRC || cfg.CRC != CRCOff,
		PrivateData: pd,
	}
	n := negotiated{crc: rep.CRC, ird: min(wantIRD, limit), ord: min(wantORD, limit)}
	if req.HasEnhancedHeader() {
		n.enhanced = true
		n.ord = min(n.ord, int(req.IRD))
		n.ird = max(n.ird, min(int(req.ORD), limit))
		rep.IRD, rep.ORD = uint16(n.ird), uint16(n.ord)
		if req.P2P {
			n.p2p, rep.P2P = true, true
			// siw's choice: Write RTR if offered, else Read, else propose
			// Write; never Send (it would consume a posted receive).
			switch {
			case req.RTR&wire.RTRWrite != 0:
				rep.RTR = wire.RTRWrite
			case req.RTR&wire.RTRRead != 0:
				rep.RTR = wire.RTRRead
			default:
				rep.RTR = wire.RTRWrite
			}
			n.rtr = rep.RTR
		}
	}
	return rep, n
}

// rejectReply builds a Reject reply to a request.
func rejectReply(req *wire.MPAFrame, pd []byte) wire.MPAFrame {
	rep := wire.MPAFrame{
		Reply:       true,
		Reject:      true,
		Revision:    max(min(req.Revision, 2), 1),
		Enhanced:    req.Enhanced && req.Revision >= 2,
		PrivateData: pd,
	}
	return rep
}

// checkReply judges the responder's reply to our request and returns the
// initiator's settings. ird and ord are the local wishes (what an enhanced
// request advertised; what a revision-1 connection simply uses).
func checkReply(cfg *Config, req, rep *wire.MPAFrame, ird, ord, limit int) (negotiated, error) {
	var n negotiated
	switch {
	case !rep.Reply:
		return n, &mpaError{msg: "request key in a reply", cause: wire.CauseLLPInvalidRequest, term: true}
	case rep.Markers:
		return n, &mpaError{msg: "reply asks for markers; not supported", cause: wire.CauseLLPInvalidRequest, term: true}
	case rep.Reject:
		return n, &RejectError{PrivateData: rep.PrivateData}
	case req.HasEnhancedHeader() && !rep.HasEnhancedHeader():
		// siw fails the connect when an enhanced request gets a plain reply.
		return n, &mpaError{msg: fmt.Sprintf("reply revision %d without enhanced header to an enhanced request", rep.Revision), cause: wire.CauseLLPInvalidRequest, term: true}
	case cfg.CRC == CRCRequired && !rep.CRC:
		return n, &mpaError{msg: "CRC required but not confirmed by the reply", cause: wire.CauseLLPInvalidRequest, term: true}
	}
	n.crc = rep.CRC
	n.ird, n.ord = ird, ord
	if req.HasEnhancedHeader() {
		n.ird, n.ord = int(req.IRD), int(req.ORD)
	}
	if !req.HasEnhancedHeader() {
		return n, nil
	}
	n.enhanced = true
	// Our ORD may not exceed the responder's IRD; the responder's ORD must
	// fit our IRD, which we raise if we can (relaxed, as siw).
	n.ord = min(n.ord, int(rep.IRD))
	if int(rep.ORD) > n.ird {
		if int(rep.ORD) > limit {
			return n, &mpaError{msg: fmt.Sprintf("responder ORD %d exceeds our IRD %d", rep.ORD, n.ird), cause: wire.CauseLLPInsufficientIRD, term: true}
		}
		n.ird = int(rep.ORD)
	}
	if req.P2P {
		if !rep.P2P || rep.RTR&req.RTR == 0 || rep.RTR&(rep.RTR-1) != 0 {
			return n, &mpaError{msg: fmt.Sprintf("no matching RTR: offered %v, reply %v", req.RTR, rep.RTR), cause: wire.CauseLLPNoMatchingRTR, term: true}
		}
		n.p2p, n.rtr = true, rep.RTR
	}
	return n, nil
}
