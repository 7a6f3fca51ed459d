package target

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/internal/testing/rawtcp"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// TestTCPMetrics: NVMe/TCP queues in the metrics as RDMA ones are: the
// per-queue command counters, the port's queues, and the port's NVMe/TCP
// PDU counters (sent and received; closed queues' kept); a queue ended by
// a protocol error counts its C2HTermReq by FES; a data digest error is
// counted. Before, the TCP port had no PDU, digest or TermReq series.
func TestTCPMetrics(t *testing.T) {
	s := startServer(t, tcpConfig(t))
	reg := metricsRegistry(t, s)
	adm := rawtcp.Dial(t, portAddr(s, 2), wire.Digests{Header: true, Data: true})
	cntlid := adm.Connect(0, nvmeof.AdminQueueDepth, testSubNQN, nvmeof.CNTLIDDynamic, testKATO)
	adm.Enable()
	io := rawtcp.Dial(t, portAddr(s, 2), wire.Digests{Header: true, Data: true})
	io.Connect(1, 32, testSubNQN, cntlid, testKATO)
	const reads, writes = 5, 3
	buf := pattern(4096, 1)
	for range writes {
		var sqe nvmeof.SQE
		sqe.BuildWrite(1, 0, 8)
		if st, _ := io.Do(&sqe, buf, true, nil); st != nvmeof.StatusSuccess {
			t.Fatal(st)
		}
	}
	for range reads {
		var sqe nvmeof.SQE
		sqe.BuildRead(1, 0, 8)
		if st, _ := io.Do(&sqe, nil, false, buf); st != nvmeof.StatusSuccess {
			t.Fatal(st)
		}
	}
	// An in-capsule write whose data digest is wrong: the command fails,
	// the queue goes on.
	var sqe nvmeof.SQE
	sqe.BuildWrite(1, 0, 8)
	sqe.SetCID(io.NextCID())
	sqe.SetPSDT(1)
	sqe.SGL1().SetIdentifier(nvmeof.SGLIDInCapsule)
	sqe.SGL1().SetInCapsule(0, 4096)
	pdu := io.PDU(wire.TypeCapsuleCmd, 0, sqe[:], buf[:4096])
	pdu[len(pdu)-1] ^= 0xFF
	if _, err := io.Conn.Write(pdu); err != nil {
		t.Fatal(err)
	}
	if hd, hdr, _ := io.Recv(); hd.Type != wire.TypeCapsuleResp || wire.CapsuleCQE(hdr).Status() == nvmeof.StatusSuccess {
		t.Fatalf("a data digest error: %s %v, want a failed CapsuleResp", hd.Type, wire.CapsuleCQE(hdr).Status())
	}

	v, _ := scrape(t, reg)
	queue := fmt.Sprintf("cntlid=%d,qid=1,subsystem=%s", cntlid, testSubNQN)
	for k, w := range map[string]float64{
		"nvmetd_queue_commands_total{" + queue + ",opcode=read,status=success}":  reads,
		"nvmetd_queue_commands_total{" + queue + ",opcode=write,status=success}": writes,
		"nvmetd_port_queues{port=2}":                           2,
		"nvmetd_tcp_digest_errors_total{digest=data,port=2}":   1,
		"nvmetd_tcp_digest_errors_total{digest=header,port=2}": 0,
	} {
		if got := v[normKey(k)]; got != w {
			t.Errorf("%s = %v, want %v", k, got, w)
		}
	}
	// Received: 2 Connects, the admin commands, 8 I/O commands and the
	// bad one; sent at least a response each and 5 C2HData.
	recv, sent := v[normKey("nvmetd_port_tcp_pdus_total{direction=received,port=2}")], v[normKey("nvmetd_port_tcp_pdus_total{direction=sent,port=2}")]
	if recv < 2+reads+writes+1 || sent < recv+reads {
		t.Errorf("port 2 PDUs received %v sent %v, want ≥ %d and ≥ received + %d", recv, sent, 2+reads+writes+1, reads)
	}

	// A bad HLEN on a third connection: a C2HTermReq with FES "invalid
	// header field", counted once the queue is gone.
	bad := rawtcp.Dial(t, portAddr(s, 2), wire.Digests{})
	var kas nvmeof.SQE
	kas.BuildKeepAlive()
	b := bad.PDU(wire.TypeCapsuleCmd, 0, kas[:], nil)
	b[2] = 40
	if _, err := bad.Conn.Write(b); err != nil {
		t.Fatal(err)
	}
	key := normKey("nvmetd_tcp_termreqs_total{direction=sent,fes=" + wire.FESInvalidHeaderField.String() + ",port=2}")
	deadline := time.Now().Add(hang)
	for {
		v, _ = scrape(t, reg)
		if v[key] == 1 {
			break
		}
		if time.Now().After(deadline) {
			var keys []string
			for k := range v {
				if strings.Contains(k, "tcp") {
					keys = append(keys, k)
				}
			}
			t.Fatalf("%s = %v, want 1 (series: %v)", key, v[key], keys)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if after := v[normKey("nvmetd_port_tcp_pdus_total{direction=received,port=2}")]; after < recv+1 {
		t.Errorf("port 2 PDUs received %v after the closed queue, want ≥ %v (closed queues' counts kept)", after, recv+1)
	}
}
