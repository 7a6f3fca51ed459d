package iwarp

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/nvmetd/nvmetd/iwarp/wire"
)

// TestEngineScripts runs the scripted scenarios in testdata/engine against
// the pure protocol engine, in the style of etcd raft's interaction tests:
// each command is one input (a post, bytes received, bytes written, a
// failure, a tick), and its output is everything the engine produced
// (completions, actions, what it laid out for the wire, its state). No
// socket, goroutine or clock is involved, so every interleaving can be
// written down and replayed exactly.
//
// Commands (arguments key=value; sizes in bytes; times in Go durations):
//
//	new [responder] [crc] [ird=N] [ord=N] [sq=N] [rq=N] [fpdu=N] [rtr=write|read]
//	    [stall=D] [write=D] [linger=D] [nudge=D]
//	reg name=M size=N access=lw,rr,rw     register memory; M names its STag
//	post-recv id=N size=N
//	post id=N op=send|sendinv|write|read [unsignaled] [len=N] [stag=M|0xHEX] [to=N]
//	     [sink=M] [inv=M|0xHEX]           one work request
//	chain (one post line per line of input) all or none
//	layout                                 lay out a batch; prints its FPDUs
//	written [n=N|all]                      the write finished n bytes of it
//	recv op=... [fields] [split=a,b,...] [badcrc]
//	                                       an FPDU from the peer, fed in pieces
//	recv-raw hex=...                       raw bytes from the peer
//	fail err=peer-closed|socket|stall
//	flush                                  the driver's final flush
//	disconnect [t=D]
//	tick t=D
//	claim who=poster|rx|tx [rxbusy]        the send policy
//	release [full]
//	state
func TestEngineScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/engine", func(t *testing.T, path string) {
		h := &engineHarness{t: t}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			h.t = t
			out := h.run(d)
			// STags are random: print the names they were registered by.
			for name, mr := range h.mrs {
				out = strings.ReplaceAll(out, fmt.Sprintf("%#x", mr.STag()), name)
			}
			return out
		})
	})
}

type engineHarness struct {
	t     *testing.T
	qp    *QP
	e     *engine
	mrs   map[string]*MR
	bufs  map[uint64][]byte
	batch [][]byte
	wrote int
	terms int
}

func (h *engineHarness) run(d *datadriven.TestData) (out string) {
	defer func() {
		if r := recover(); r != nil {
			out = fmt.Sprintf("panic: %v\n", r)
		}
	}()
	var b strings.Builder
	switch d.Cmd {
	case "new":
		h.cmdNew(d)
	case "reg":
		var name string
		var size int
		d.ScanArgs(h.t, "name", &name)
		d.ScanArgs(h.t, "size", &size)
		var acc Access
		if d.HasArg("access") {
			var s string
			d.ScanArgs(h.t, "access", &s)
			for _, a := range strings.Split(s, ",") {
				switch a {
				case "lw":
					acc |= AccessLocalWrite
				case "rr":
					acc |= AccessRemoteRead
				case "rw":
					acc |= AccessRemoteWrite
				}
			}
		}
		buf := make([]byte, size)
		for i := range buf {
			buf[i] = byte(i)
		}
		mr, err := h.qp.pd.RegisterMemoryAt(buf, 0x10000*uint64(len(h.mrs)+1), acc)
		if err != nil {
			return err.Error() + "\n"
		}
		h.mrs[name] = mr
	case "post-recv":
		var id uint64
		var size int
		d.ScanArgs(h.t, "id", &id)
		d.ScanArgs(h.t, "size", &size)
		buf := make([]byte, size)
		h.bufs[id] = buf
		if err := h.e.postRecv(&RecvWR{ID: id, Buf: buf}); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	case "post":
		wr, err := h.parseWR(d.CmdArgs)
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		var ent [1]sqEntry
		if err := h.qp.prepare(&wr, &ent[0]); err != nil {
			return "error: " + err.Error() + "\n"
		}
		if err := h.e.postSend(ent[:]); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	case "chain":
		var ents []sqEntry
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			args, err := parseArgs(line)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			wr, err := h.parseWR(args)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			var ent sqEntry
			if err := h.qp.prepare(&wr, &ent); err != nil {
				return "error: " + err.Error() + "\n"
			}
			ents = append(ents, ent)
		}
		if err := h.e.postSend(ents); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	case "layout":
		h.batch = h.e.txLayout()
		h.wrote = 0
		if h.batch == nil {
			b.WriteString("nothing to write\n")
			break
		}
		b.WriteString(h.describeBatch(h.batch, h.e.tx.iovOff))
	case "written":
		total := 0
		for i, p := range h.batch {
			if i == 0 {
				total += len(p) - h.e.tx.iovOff
			} else {
				total += len(p)
			}
		}
		n := total
		if d.HasArg("n") {
			d.ScanArgs(h.t, "n", &n)
		}
		done := h.e.txWritten(n)
		fmt.Fprintf(&b, "wrote %d of %d; batch done=%v\n", n, total, done)
		if !done {
			h.batch = h.e.tx.iov[h.e.tx.iovIdx:]
		} else {
			h.batch = nil
		}
	case "recv":
		bs, err := h.buildFPDU(d)
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		h.feed(&b, bs, splits(d))
	case "recv-raw":
		var hx string
		d.ScanArgs(h.t, "hex", &hx)
		var bs []byte
		for i := 0; i+1 < len(hx); i += 2 {
			v, _ := strconv.ParseUint(hx[i:i+2], 16, 8)
			bs = append(bs, byte(v))
		}
		h.feed(&b, bs, splits(d))
	case "fail":
		var s string
		d.ScanArgs(h.t, "err", &s)
		switch s {
		case "peer-closed":
			h.e.fail(ErrPeerClosed)
		case "stall":
			h.e.fail(ErrStalled)
		default:
			h.e.fail(errors.New(s))
		}
	case "flush":
		h.e.flush()
	case "disconnect":
		var at time.Duration
		if d.HasArg("t") {
			var s string
			d.ScanArgs(h.t, "t", &s)
			at, _ = time.ParseDuration(s)
		}
		h.e.disconnect(at)
	case "tick":
		var s string
		d.ScanArgs(h.t, "t", &s)
		at, err := time.ParseDuration(s)
		if err != nil {
			return err.Error()
		}
		next := h.e.tick(at)
		fmt.Fprintf(&b, "next tick: %v\n", next)
	case "claim":
		var who string
		d.ScanArgs(h.t, "who", &who)
		h.e.rxBusy = d.HasArg("rxbusy")
		w := map[string]writer{"poster": writerPoster, "rx": writerRx, "tx": writerTx}[who]
		fmt.Fprintf(&b, "claimed: %v\n", h.e.txClaim(w))
		h.e.rxBusy = false
	case "release":
		h.e.txRelease(d.HasArg("full"))
	case "terminate":
		fr := h.e.terminateFrame(make([]byte, 0, 256))
		if fr == nil {
			return "no terminate (a message is half sent)\n"
		}
		var hd wire.Header
		n, err := wire.DecodeHeader(fr, &hd)
		if err != nil {
			return "undecodable: " + err.Error() + "\n"
		}
		tm, err := wire.DecodeTerminate(fr[n : n+hd.PayloadLen()])
		if err != nil {
			return "undecodable terminate: " + err.Error() + "\n"
		}
		fmt.Fprintf(&b, "%v qn=%d msn=%d: %v; ddp header included=%v seglen=%d", hd.Opcode, hd.QN, hd.MSN, tm.Cause, tm.DDPHeaderIncluded, tm.DDPSegLen)
		if len(tm.Headers) >= 2 {
			fmt.Fprintf(&b, " headers: %d bytes of a %v", len(tm.Headers), wire.Opcode(tm.Headers[1]&0xF))
		}
		b.WriteString("\n")
		return b.String()
	case "valid":
		var name string
		d.ScanArgs(h.t, "name", &name)
		return fmt.Sprintf("%s valid=%v\n", name, h.mrs[name].Valid())
	case "state":
		fmt.Fprintf(&b, "state %v; sq %d, rq %d, orq %d, irq %d; err %v\n", h.e.state, h.e.sq.len(), h.e.rq.len(), h.e.orq.len(), h.e.irq.len(), h.e.err)
		return b.String()
	default:
		h.t.Fatalf("unknown command %q", d.Cmd)
	}
	h.report(&b)
	return b.String()
}

func (h *engineHarness) cmdNew(d *datadriven.TestData) {
	arg := func(k string, def int) int {
		if d.HasArg(k) {
			var v int
			d.ScanArgs(h.t, k, &v)
			return v
		}
		return def
	}
	dur := func(k string) time.Duration {
		if d.HasArg(k) {
			var s string
			d.ScanArgs(h.t, k, &s)
			v, err := time.ParseDuration(s)
			if err != nil {
				h.t.Fatal(err)
			}
			return v
		}
		return 0
	}
	qp, err := NewQP(QPAttr{PD: NewPD(), SendCQ: NewCQ(16), RecvCQ: NewCQ(16), SendDepth: arg("sq", 16), RecvDepth: arg("rq", 16)})
	if err != nil {
		h.t.Fatal(err)
	}
	h.qp, h.e = qp, qp.e
	h.mrs, h.bufs = map[string]*MR{}, map[uint64][]byte{}
	neg := negotiated{crc: d.HasArg("crc"), enhanced: true, ird: arg("ird", 4), ord: arg("ord", 4)}
	if d.HasArg("rtr") {
		var s string
		d.ScanArgs(h.t, "rtr", &s)
		neg.p2p = true
		neg.rtr = wire.RTRWrite
		if s == "read" {
			neg.rtr = wire.RTRRead
		}
	}
	lim := engineLimits{stall: dur("stall"), write: dur("write"), linger: dur("linger"), nudge: dur("nudge"), maxNudges: maxNudges}
	h.e.start(neg, d.HasArg("responder"), arg("fpdu", 1024), lim, 0)
}

// parseWR builds a work request from post arguments.
func (h *engineHarness) parseWR(args []datadriven.CmdArg) (SendWR, error) {
	wr := SendWR{Signaled: true}
	for _, a := range args {
		v := ""
		if len(a.Vals) > 0 {
			v = a.Vals[0]
		}
		switch a.Key {
		case "id":
			n, _ := strconv.ParseUint(v, 10, 64)
			wr.ID = n
		case "op":
			ops := map[string]WROpcode{"send": WRSend, "sendinv": WRSendInv, "sendse": WRSendSE, "write": WRWrite, "read": WRRead}
			op, ok := ops[v]
			if !ok {
				return wr, fmt.Errorf("op %q", v)
			}
			wr.Opcode = op
		case "unsignaled":
			wr.Signaled = false
		case "len":
			n, _ := strconv.Atoi(v)
			if wr.Opcode == WRRead {
				wr.Length = uint32(n)
			} else {
				buf := make([]byte, n)
				for i := range buf {
					buf[i] = byte(i + 1)
				}
				wr.Local = [][]byte{buf}
			}
		case "stag":
			wr.RemoteSTag = h.stag(v)
		case "to":
			n, _ := strconv.ParseUint(v, 0, 64)
			wr.RemoteTO = n
		case "sink":
			wr.SinkMR = h.mrs[v]
		case "inv":
			wr.InvalidateSTag = h.stag(v)
		default:
			return wr, fmt.Errorf("unknown argument %q", a.Key)
		}
	}
	return wr, nil
}

func (h *engineHarness) stag(v string) uint32 {
	if mr, ok := h.mrs[v]; ok {
		return mr.STag()
	}
	n, _ := strconv.ParseUint(v, 0, 32)
	return uint32(n)
}

func parseArgs(line string) ([]datadriven.CmdArg, error) {
	var out []datadriven.CmdArg
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		a := datadriven.CmdArg{Key: k}
		if ok {
			a.Vals = []string{v}
		}
		out = append(out, a)
	}
	return out, nil
}

// buildFPDU makes the bytes of one FPDU from recv arguments.
func (h *engineHarness) buildFPDU(d *datadriven.TestData) ([]byte, error) {
	var opName string
	d.ScanArgs(h.t, "op", &opName)
	u32 := func(k string, def uint32) uint32 {
		if !d.HasArg(k) {
			return def
		}
		var s string
		d.ScanArgs(h.t, k, &s)
		if mr, ok := h.mrs[s]; ok {
			return mr.STag()
		}
		n, err := strconv.ParseUint(s, 0, 32)
		if err != nil {
			h.t.Fatalf("%s=%s: %v", k, s, err)
		}
		return uint32(n)
	}
	n := int(u32("len", 0))
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(0xA0 + i)
	}
	last := !d.HasArg("notlast")
	var fr []byte
	switch opName {
	case "write", "readresp":
		op := wire.OpWrite
		if opName == "readresp" {
			op = wire.OpReadResponse
		}
		fr = make([]byte, wire.TaggedHeaderLen)
		var to uint64
		if d.HasArg("to") {
			var s string
			d.ScanArgs(h.t, "to", &s)
			if mr, ok := h.mrs[s]; ok {
				to = mr.IOVA()
			} else {
				to, _ = strconv.ParseUint(s, 0, 64)
			}
		}
		wire.PutTaggedHeader(fr, op, last, u32("stag", 0), to, n)
	case "send", "sendinv", "readreq", "term":
		ops := map[string]wire.Opcode{"send": wire.OpSend, "sendinv": wire.OpSendInv, "readreq": wire.OpReadRequest, "term": wire.OpTerminate}
		op := ops[opName]
		qn := map[string]uint32{"send": wire.QNSend, "sendinv": wire.QNSend, "readreq": wire.QNReadRequest, "term": wire.QNTerminate}[opName]
		if opName == "readreq" {
			rr := wire.ReadRequest{SinkSTag: u32("sink", 0x55), SinkTO: 0, Size: u32("size", 0), SrcSTag: u32("src", 0)}
			if d.HasArg("srcto") {
				rr.SrcTO = uint64(u32("srcto", 0))
			} else if mr, ok := h.mrs[argString(d, "src")]; ok {
				rr.SrcTO = mr.IOVA()
			}
			payload = make([]byte, wire.ReadRequestLen)
			rr.Encode(payload)
			n = len(payload)
		}
		if opName == "term" {
			t := wire.Terminate{Cause: wire.CauseRDMAPUnexpectedOpcode}
			payload = t.AppendPayload(nil)
			n = len(payload)
		}
		fr = make([]byte, wire.UntaggedHeaderLen)
		wire.PutUntaggedHeader(fr, op, last, u32("inv", 0), u32("qn", qn), u32("msn", 1), u32("mo", 0), n)
	default:
		return nil, fmt.Errorf("op %q", opName)
	}
	fr = append(fr, payload...)
	fr = append(fr, make([]byte, wire.PadLen(len(fr)-wire.FPDULenFieldLen)+wire.CRCLen)...)
	if h.e.neg.crc {
		crc := wire.CRC(fr[:len(fr)-wire.CRCLen])
		if d.HasArg("badcrc") {
			crc++
		}
		wire.PutCRC(fr[len(fr)-wire.CRCLen:], crc)
	}
	return fr, nil
}

func argString(d *datadriven.TestData, k string) string {
	for _, a := range d.CmdArgs {
		if a.Key == k && len(a.Vals) > 0 {
			return a.Vals[0]
		}
	}
	return ""
}

func splits(d *datadriven.TestData) []int {
	s := argString(d, "split")
	if s == "" {
		return nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

// feed gives the engine bs in pieces of the given sizes (the rest in one),
// placing payloads straight when the engine asks (as the driver would when
// a read does not already hold them).
func (h *engineHarness) feed(b *strings.Builder, bs []byte, pieces []int) {
	for len(bs) > 0 {
		n := len(bs)
		if len(pieces) > 0 {
			n = min(pieces[0], n)
			pieces = pieces[1:]
		}
		chunk := bs[:n]
		bs = bs[n:]
		used, place, err := h.e.rxConsume(chunk)
		if err != nil {
			fmt.Fprintf(b, "rx error after %d of %d bytes: %v\n", used, len(chunk), err)
			return
		}
		_ = place
	}
}

// report prints what the engine produced: completions, actions, state.
func (h *engineHarness) report(b *strings.Builder) {
	for _, wc := range h.e.out {
		fmt.Fprintf(b, "wc id=%d op=%v status=%v", wc.ID, wc.Opcode, wc.Status)
		if wc.ByteLen > 0 {
			fmt.Fprintf(b, " len=%d", wc.ByteLen)
		}
		if wc.Invalidated {
			b.WriteString(" invalidated")
		}
		b.WriteString("\n")
		if wc.Opcode == WCRecv && wc.Status == WCSuccess {
			if buf := h.bufs[wc.ID]; buf != nil {
				fmt.Fprintf(b, "  data %x\n", buf[:min(wc.ByteLen, 8)])
			}
		}
	}
	h.e.out = h.e.out[:0]
	a := h.e.takeActions()
	var names []string
	for bit, n := range map[actions]string{actTx: "tx", actClose: "close", actTerminate: "terminate", actFIN: "fin"} {
		if a&bit != 0 {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) > 0 {
		fmt.Fprintf(b, "actions: %s\n", strings.Join(names, ","))
	}
	if h.e.state != QPStateRTS {
		fmt.Fprintf(b, "state: %v", h.e.state)
		if h.e.err != nil {
			fmt.Fprintf(b, " (%v)", h.e.err)
		}
		b.WriteString("\n")
	}
}

// describeBatch decodes the FPDUs of a laid-out batch.
func (h *engineHarness) describeBatch(iov [][]byte, off int) string {
	var all []byte
	for i, p := range iov {
		if i == 0 {
			p = p[off:]
		}
		all = append(all, p...)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "batch: %d bytes in %d iovecs\n", len(all), len(iov))
	for len(all) > 0 {
		var hd wire.Header
		n, err := wire.DecodeHeader(all, &hd)
		if err != nil {
			fmt.Fprintf(&b, "  undecodable: %v\n", err)
			break
		}
		plen := hd.PayloadLen()
		fmt.Fprintf(&b, "  %v", hd.Opcode)
		if hd.Tagged {
			fmt.Fprintf(&b, " stag=%s to=%#x", h.stagName(hd.STag), hd.TO)
		} else {
			fmt.Fprintf(&b, " qn=%d msn=%d mo=%d", hd.QN, hd.MSN, hd.MO)
			if hd.Opcode.Invalidates() {
				fmt.Fprintf(&b, " inv=%s", h.stagName(hd.STag))
			}
		}
		fmt.Fprintf(&b, " len=%d last=%v", plen, hd.Last)
		if hd.Opcode == wire.OpReadRequest {
			rr, _ := wire.DecodeReadRequest(all[n:])
			fmt.Fprintf(&b, " sink=%s size=%d src=%s", h.stagName(rr.SinkSTag), rr.Size, h.stagName(rr.SrcSTag))
		}
		b.WriteString("\n")
		all = all[min(hd.FPDULen(), len(all)):]
	}
	return b.String()
}

// stagName names a registered STag for the script output (STags are
// random), or prints it in hex.
func (h *engineHarness) stagName(v uint32) string {
	for name, mr := range h.mrs {
		if mr.STag() == v {
			return name
		}
	}
	return fmt.Sprintf("%#x", v)
}
