package target

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/backend"
	"github.com/nvmetd/nvmetd/internal/testing/rawtcp"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/tcp/wire"
)

// stuckIO is a backend whose writes (of data starting with mark) stay in
// the backend until the test opens the gate, as writes stuck in librbd on
// an OSD out of reach do: on its asynchronous path (backend.AsyncIO, as
// the rbd backend's) or, with sync set, in the synchronous call a worker
// makes. At its return it checks that the data buffer still holds what the
// host wrote (a buffer reused meanwhile would not) and writes over it (a
// context given out again would show it).
type stuckIO struct {
	backend.Backend
	mark    byte
	entered chan struct{}
	open    chan struct{}
	once    sync.Once
	clobber atomic.Int32 // buffers that changed while held
	mu      sync.Mutex
	want    map[*byte][]byte
}

func (b *stuckIO) hold(p []byte) bool {
	if len(p) == 0 || p[0] != b.mark {
		return false
	}
	b.mu.Lock()
	b.want[&p[0]] = bytes.Clone(p)
	b.mu.Unlock()
	b.entered <- struct{}{}
	return true
}

func (b *stuckIO) done(p []byte) {
	<-b.open
	b.mu.Lock()
	if !bytes.Equal(b.want[&p[0]], p) {
		b.clobber.Add(1)
	}
	b.mu.Unlock()
	for i := range p {
		p[i] = 0x5A
	}
}

func (b *stuckIO) WriteAt(p []byte, off int64, fua bool) error {
	if b.hold(p) {
		err := b.Backend.WriteAt(p, off, fua)
		b.done(p)
		return err
	}
	return b.Backend.WriteAt(p, off, fua)
}

func (b *stuckIO) StartReadAt(p []byte, off int64, c backend.Completion) bool {
	c.IODone(b.Backend.ReadAt(p, off))
	return true
}

func (b *stuckIO) StartWriteAt(p []byte, off int64, fua bool, c backend.Completion) bool {
	if !b.hold(p) {
		c.IODone(b.Backend.WriteAt(p, off, fua))
		return true
	}
	err := b.Backend.WriteAt(p, off, fua)
	go func() {
		b.done(p)
		c.IODone(err)
	}()
	return true
}

func (b *stuckIO) release() { b.once.Do(func() { close(b.open) }) }

// TestAnswerGroupInFlight (issue 21): once its ANA group is inaccessible,
// AnswerGroupInFlight answers the group's commands stuck in their backend
// at once with ANA Inaccessible (0x302), over RDMA and NVMe/TCP, on the
// backend's asynchronous path and on a worker's synchronous call, while
// their contexts and data buffers stay held: GroupInFlight counts them, the
// queue goes on with other commands meanwhile, and no held buffer changes
// before the backend returns. Once it returns, each is released exactly
// once (no second answer reaches the host: its queue goes on) and
// GroupInFlight falls to 0. It refuses while the group is optimized.
// Before, there was no early answer: the commands were answered only when
// the backend returned (an rbd write on an OSD out of reach: at its
// op_timeout).
func TestAnswerGroupInFlight(t *testing.T) {
	for _, path := range []string{"async", "sync"} {
		t.Run(path, func(t *testing.T) {
			ns1 := memNS(1, "16MiB")
			ns1.ANAGroup = 1
			ns1.IOWorkers = 8
			cfg := testConfig(t, ns1)
			cfg.Ports = append(cfg.Ports, PortConfig{ID: 2, Address: "127.0.0.1", ServiceID: freePort(t), Transport: TransportTCP, Subsystems: []string{testSubNQN}})
			s := startServer(t, cfg)
			tg := &Target{s: s}
			if err := tg.SetGatewayGuard(GatewayGuard{ANAGroups: []uint32{1}}); err != nil {
				t.Fatal(err)
			}
			if err := tg.SetGroupANA(1, nvmeof.ANAOptimized); err != nil {
				t.Fatal(err)
			}
			ns := s.subsystems[testSubNQN].ns.Load().byID[1]
			b := &stuckIO{Backend: ns.be, mark: 0xEE, entered: make(chan struct{}, 16), open: make(chan struct{}), want: map[*byte][]byte{}}
			t.Cleanup(b.release)
			ns.be, ns.inline, ns.nowait, ns.async = b, false, nil, b
			if path == "sync" {
				ns.async = nil // a worker's synchronous WriteAt
			}

			h := mustConnect(t, portAddr(s, 1), testSubNQN)
			h.setup(1)
			th := rawtcp.Dial(t, portAddr(s, 2), wire.Digests{})
			cntlid := th.Connect(0, nvmeof.AdminQueueDepth, testSubNQN, nvmeof.CNTLIDDynamic, testKATO)
			th.Enable()
			tio := rawtcp.Dial(t, portAddr(s, 2), wire.Digests{})
			tio.Connect(1, 32, testSubNQN, cntlid, testKATO)

			// Four RDMA writes (three of 16 KiB: keyed; one of 4 KiB: in
			// the capsule, its data in a receive buffer) and one NVMe/TCP
			// write stick in the backend.
			const nRDMA = 4
			var results []<-chan error
			for i := range nRDMA {
				size := 16 << 10
				if i == nRDMA-1 {
					size = 4096
				}
				data := bytes.Repeat([]byte{0xEE}, size)
				data[1] = byte(i)
				results = append(results, submit(t, h.io[0], rw(true, 1, uint64(i*32), data, 512)))
			}
			tdata := bytes.Repeat([]byte{0xEE}, 4096)
			tcid := tio.NextCID()
			tio.Capsule(rawtcp.RWSQE(nvmeof.NVMWrite, tcid, 1000, len(tdata), true), tdata)
			for range nRDMA + 1 {
				select {
				case <-b.entered:
				case <-time.After(hang):
					t.Fatal("the writes did not reach the backend")
				}
			}
			if _, err := tg.AnswerGroupInFlight(1); err == nil {
				t.Fatal("AnswerGroupInFlight of an optimized group accepted")
			}
			if err := tg.SetGroupANA(1, nvmeof.ANAInaccessible); err != nil {
				t.Fatal(err)
			}
			n, err := tg.AnswerGroupInFlight(1)
			if err != nil {
				t.Fatal(err)
			}
			if n != nRDMA+1 {
				t.Fatalf("AnswerGroupInFlight answered %d, want %d", n, nRDMA+1)
			}
			for i, ch := range results {
				select {
				case err := <-ch:
					if st, ok := err.(nvmeof.Status); !ok || st.Code() != nvmeof.StatusANAInaccessible {
						t.Fatalf("RDMA write %d: %v, want ANA Inaccessible", i, err)
					}
				case <-time.After(hang):
					t.Fatalf("RDMA write %d not answered while its backend call is stuck", i)
				}
			}
			if st := tio.CQE(tcid, nil); st.Code() != nvmeof.StatusANAInaccessible {
				t.Fatalf("NVMe/TCP write: %v, want ANA Inaccessible", st)
			}
			if got := tg.GroupInFlight(1); got != nRDMA+1 {
				t.Fatalf("GroupInFlight %d while the backend holds %d", got, nRDMA+1)
			}
			if n, _ := tg.AnswerGroupInFlight(1); n != 0 {
				t.Fatalf("a second AnswerGroupInFlight answered %d again", n)
			}
			// The queues go on meanwhile (the group refuses: inaccessible;
			// the commands take other contexts and buffers).
			for i := range 40 {
				err := do(t, h.io[0], rw(true, 1, 2000, pattern(16<<10, i), 512))
				if st, ok := err.(nvmeof.Status); !ok || st.Code() != nvmeof.StatusANAInaccessible {
					t.Fatalf("write %d on the inaccessible group: %v", i, err)
				}
				var sqe nvmeof.SQE
				sqe.BuildWrite(1, 3000, 8)
				if st, _ := tio.Do(&sqe, pattern(4096, i), true, nil); st.Code() != nvmeof.StatusANAInaccessible {
					t.Fatalf("NVMe/TCP write %d on the inaccessible group: %v", i, st)
				}
			}
			b.release()
			waitFor(t, "the held commands released", hang, func() bool { return tg.GroupInFlight(1) == 0 })
			if c := b.clobber.Load(); c != 0 {
				t.Fatalf("%d held data buffers changed before their backend returned", c)
			}
			// One answer per command: both queues go on, served again.
			if err := tg.SetGroupANA(1, nvmeof.ANAOptimized); err != nil {
				t.Fatal(err)
			}
			for i := range 40 {
				if err := do(t, h.io[0], rw(true, 1, 2000, pattern(16<<10, i), 512)); err != nil {
					t.Fatalf("write %d after the release: %v", i, err)
				}
				var sqe nvmeof.SQE
				sqe.BuildWrite(1, 3000, 8)
				if st, _ := tio.Do(&sqe, pattern(4096, i), true, nil); st != nvmeof.StatusSuccess {
					t.Fatalf("NVMe/TCP write %d after the release: %v", i, st)
				}
			}
			if st := h.io[0].Stats(); st.Completed == 0 {
				t.Fatalf("host stats %+v", st)
			}
		})
	}
}
