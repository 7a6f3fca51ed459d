package tcp

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/rawtcp"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// FuzzQueuePDUs feeds arbitrary bytes to a controller queue, over a real
// loopback connection, after a valid ICReq and Connect: whatever they are,
// the queue answers, terminates or closes, and never panics or hangs.
func FuzzQueuePDUs(f *testing.F) {
	h := rawtcp.New(f, nil, wire.Digests{Header: true, Data: true})
	var dh [wire.DataHLen]byte
	wire.PutDataHeader(dh[:], wire.Header{}, 7, 0, 0, 512)
	f.Add(h.AppendPDU(nil, wire.TypeCapsuleCmd, 0, rawtcp.RWSQE(nvmeof.NVMRead, 5, 0, 4096, false)[:], nil))
	f.Add(h.AppendPDU(nil, wire.TypeCapsuleCmd, 0, rawtcp.RWSQE(nvmeof.NVMWrite, 6, 0, 512, true)[:], make([]byte, 512)))
	f.Add(append(h.AppendPDU(nil, wire.TypeCapsuleCmd, 0, rawtcp.RWSQE(nvmeof.NVMWrite, 7, 0, 512, false)[:], nil),
		h.AppendPDU(nil, wire.TypeH2CData, wire.FlagLastPDU, dh[wire.CommonHeaderSize:], make([]byte, 512))...))
	// Straight placement: in-capsule data of 4 KiB, and an H2CData whose
	// data runs past the command's buffer.
	f.Add(h.AppendPDU(nil, wire.TypeCapsuleCmd, 0, rawtcp.RWSQE(nvmeof.NVMWrite, 8, 0, 4096, true)[:], make([]byte, 4096)))
	wire.PutDataHeader(dh[:], wire.Header{}, 9, 0, 0, 8192)
	f.Add(append(h.AppendPDU(nil, wire.TypeCapsuleCmd, 0, rawtcp.RWSQE(nvmeof.NVMWrite, 9, 0, 4096, false)[:], nil),
		h.AppendPDU(nil, wire.TypeH2CData, wire.FlagLastPDU, dh[wire.CommonHeaderSize:], make([]byte, 8192))...))
	f.Add(wire.AppendTermReq(nil, wire.TypeH2CTermReq, wire.FESInvalidHeaderField, 0, nil))
	f.Add([]byte{4, 3, 72, 0, 255, 255, 255, 255})
	m := newMemHandler()
	m.closed = make(chan error, 1<<20)
	// DirectMin 512: data of 512 bytes and more is read straight into
	// place (rxReader.ReadData), so that the fuzzer exercises that path.
	ln := serve(f, Config{ConnectTimeout: 5 * time.Second, PDUTimeout: 200 * time.Millisecond, InlineDataSize: 8192, DirectMin: 512}, m)
	var sqe nvmeof.SQE
	sqe[0], sqe[1], sqe[4] = nvmeof.OpFabrics, 0x40, nvmeof.FCTypeConnect
	binary.LittleEndian.PutUint16(sqe[42:], 1)
	binary.LittleEndian.PutUint16(sqe[44:], 31)
	sqe.SGL1().SetIdentifier(nvmeof.SGLIDInCapsule)
	sqe.SGL1().SetInCapsule(0, nvmeof.ConnectDataSize)
	connect := h.AppendPDU(nil, wire.TypeCapsuleCmd, 0, sqe[:], make([]byte, nvmeof.ConnectDataSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Skip(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(fuzzDeadline))
		msg := append(append(append([]byte(nil), wire.NewICReq(0, h.Digests, 0)[:]...), connect...), b...)
		if _, err := c.Write(msg); err != nil {
			return
		}
		_ = c.(*net.TCPConn).CloseWrite()
		// The queue ends (our FIN, a TermReq, or the PDU timeout of a
		// PDU cut short) well within the deadline.
		if _, err := io.Copy(io.Discard, c); err != nil && !rawtcp.IsReset(err) {
			t.Fatalf("the queue did not end: %v (input %x)", err, b)
		}
	})
}

// fuzzDeadline is how long one input may keep the queue: the bounds are
// 200 ms; 150 times that is generous.
var fuzzDeadline = 30 * time.Second
