package target

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/backend/backendtest"
	"github.com/nvmetd/nvmetd/nvmeof"
	"github.com/nvmetd/nvmetd/nvmeof/rdma"
)

// TestIO runs every NVM command with data verification against memory, file
// and block (loop device) backends of both block sizes.
func TestIO(t *testing.T) {
	type backendCase struct {
		name string
		ns   func(t *testing.T) NamespaceConfig
	}
	cases := []backendCase{
		{"memory", func(t *testing.T) NamespaceConfig { return memNS(1, "32MiB") }},
		{"memory-4k", func(t *testing.T) NamespaceConfig {
			ns := memNS(1, "32MiB")
			ns.Backend.BlockSize = 4096
			return ns
		}},
		{"file", func(t *testing.T) NamespaceConfig {
			return NamespaceConfig{NSID: 1, Backend: BackendConfig{Kind: "file", Path: filepath.Join(t.TempDir(), "ns.img"), Size: "32MiB"}}
		}},
		{"file-direct", func(t *testing.T) NamespaceConfig {
			return NamespaceConfig{NSID: 1, Backend: BackendConfig{Kind: "file", Path: filepath.Join(t.TempDir(), "ns.img"), Size: "32MiB", Direct: true}}
		}},
		{"block", func(t *testing.T) NamespaceConfig {
			dev := loopDevice(t, 32<<20, 512)
			return NamespaceConfig{NSID: 1, Backend: BackendConfig{Kind: "block", Path: dev}}
		}},
	}
	for _, bc := range cases {
		t.Run(bc.name, func(t *testing.T) {
			nsc := bc.ns(t)
			s := startServer(t, testConfig(t, nsc))
			h := mustConnect(t, portAddr(s, 1), testSubNQN)
			h.setup(1)
			q := h.io[0]
			nsb, err := h.identify(nvmeof.CNSNamespace, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			idns, _ := nvmeof.ParseIdentifyNamespace(nsb)
			bs := idns.LBAF(int(idns.FLBAS() & 0xF)).BlockSize()
			nsze := idns.NSZE()
			if uint64(bs)*nsze != 32<<20 {
				t.Fatalf("namespace of %d blocks of %d bytes", nsze, bs)
			}
			// Writes of several sizes: in-capsule (up to 4 KiB) and keyed
			// (up to the 1 MiB MDTS), then reads of the same ranges.
			type wr struct {
				lba  uint64
				data []byte
			}
			var written []wr
			lba := uint64(0)
			for i, size := range []int{512, 4096, 8192, 64 << 10, 128 << 10, 1 << 20} {
				if size < bs {
					continue
				}
				data := pattern(size, i+1)
				r := rw(true, 1, lba, data, bs)
				r.SQE.RWCmd().SetFUA(i%2 == 0)
				if err := do(t, q, r); err != nil {
					t.Fatalf("write %d bytes at %d: %v", size, lba, err)
				}
				written = append(written, wr{lba, data})
				lba += uint64(size / bs)
			}
			for _, w := range written {
				got := make([]byte, len(w.data))
				if err := do(t, q, rw(false, 1, w.lba, got, bs)); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, w.data) {
					t.Fatalf("read back %d bytes at %d differ", len(w.data), w.lba)
				}
			}
			// The last block of the namespace is reachable; one beyond is not.
			last := make([]byte, bs)
			if err := do(t, q, rw(true, 1, nsze-1, pattern(bs, 9), bs)); err != nil {
				t.Fatal(err)
			}
			if err := do(t, q, rw(false, 1, nsze-1, last, bs)); err != nil || !bytes.Equal(last, pattern(bs, 9)) {
				t.Fatalf("last block: %v", err)
			}
			wantStatus(t, "read past the end", do(t, q, rw(false, 1, nsze-1, make([]byte, 2*bs), bs)), nvmeof.StatusLBAOutOfRange|nvmeof.StatusDNR)
			wantStatus(t, "write past the end", do(t, q, rw(true, 1, nsze, make([]byte, bs), bs)), nvmeof.StatusLBAOutOfRange|nvmeof.StatusDNR)
			r := rw(false, 1, ^uint64(0)-1, make([]byte, 4*bs), bs)
			wantStatus(t, "read with an LBA overflow", do(t, q, r), nvmeof.StatusLBAOutOfRange|nvmeof.StatusDNR)

			// Flush one namespace, and all of them.
			fl := &rdma.HostRequest{}
			fl.SQE.BuildFlush(1)
			if err := do(t, q, fl); err != nil {
				t.Fatal(err)
			}
			fl.SQE.BuildFlush(nvmeof.NSIDAll)
			if err := do(t, q, fl); err != nil {
				t.Fatal(err)
			}

			// Write Zeroes over the first write's blocks, with and without
			// DEAC, and check zeroes come back.
			for _, deac := range []bool{false, true} {
				w := written[1]
				if err := do(t, q, rw(true, 1, w.lba, w.data, bs)); err != nil {
					t.Fatal(err)
				}
				wz := &rdma.HostRequest{}
				cmd := wz.SQE.BuildWriteZeroes(1, w.lba, uint32(len(w.data)/bs))
				if deac {
					cmd.SetCDW12(cmd.CDW12() | nvmeof.WZDEAC)
				}
				if err := do(t, q, wz); err != nil {
					t.Fatalf("write zeroes (deac %v): %v", deac, err)
				}
				got := make([]byte, len(w.data))
				if err := do(t, q, rw(false, 1, w.lba, got, bs)); err != nil || !bytes.Equal(got, make([]byte, len(got))) {
					t.Fatalf("after write zeroes (deac %v): %v", deac, err)
				}
			}
			wz := &rdma.HostRequest{}
			wz.SQE.BuildWriteZeroes(1, nsze-1, 2)
			wantStatus(t, "write zeroes past the end", do(t, q, wz), nvmeof.StatusLBAOutOfRange|nvmeof.StatusDNR)

			// Dataset Management deallocate of two ranges: memory and files
			// read back zeroes (DLFEAT says so); block devices only succeed.
			w := written[4] // 128 KiB
			ranges := make([]byte, 2*nvmeof.DSMRangeSize)
			for i := 0; i < 2; i++ {
				rg := (*nvmeof.DSMRange)(ranges[i*16 : i*16+16])
				rg.SetSLBA(w.lba + uint64(i)*uint64(len(w.data)/bs/2))
				rg.SetNLB(uint32(len(w.data) / bs / 2))
			}
			dsm := &rdma.HostRequest{Data: ranges, Write: true}
			dsm.SQE.BuildDSM(1, 2, nvmeof.DSMAD)
			if err := do(t, q, dsm); err != nil {
				t.Fatalf("deallocate: %v", err)
			}
			if idns.DLFEAT()&7 == nvmeof.DLFEATReadZeroes {
				got := make([]byte, len(w.data))
				if err := do(t, q, rw(false, 1, w.lba, got, bs)); err != nil || !bytes.Equal(got, make([]byte, len(got))) {
					t.Fatalf("read after deallocate: %v", err)
				}
			}
			// As the Linux host sends it (nvme_setup_discard): one range
			// in a 4 KiB buffer.
			linux := make([]byte, 4096)
			copy(linux, ranges[:16])
			dsm = &rdma.HostRequest{Data: linux, Write: true}
			dsm.SQE.BuildDSM(1, 1, nvmeof.DSMAD)
			if err := do(t, q, dsm); err != nil {
				t.Fatalf("deallocate with a 4 KiB range buffer: %v", err)
			}
			binary.LittleEndian.PutUint64(ranges[8:], nsze) // SLBA beyond the end
			dsm = &rdma.HostRequest{Data: ranges, Write: true}
			dsm.SQE.BuildDSM(1, 2, nvmeof.DSMAD)
			wantStatus(t, "deallocate past the end", do(t, q, dsm), nvmeof.StatusLBAOutOfRange|nvmeof.StatusDNR)
			dsm = &rdma.HostRequest{Data: ranges[:16], Write: true}
			dsm.SQE.BuildDSM(1, 2, nvmeof.DSMAD)
			wantStatus(t, "DSM data shorter than NR says", do(t, q, dsm), nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)

			// Transfer length must match (NLB+1) blocks.
			r = rw(false, 1, 0, make([]byte, 2*bs), bs)
			r.SQE.RWCmd().SetNLB(0)
			wantStatus(t, "read with a longer SGL", do(t, q, r), nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)
			r = rw(true, 1, 0, make([]byte, bs), bs)
			r.SQE.RWCmd().SetNLB(1)
			wantStatus(t, "in-capsule write shorter than NLB", do(t, q, r), nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)
			r = rw(true, 1, 0, make([]byte, 8*bs), bs)
			r.SQE.RWCmd().SetNLB(15)
			wantStatus(t, "keyed write shorter than NLB", do(t, q, r), nvmeof.StatusSGLInvalidData|nvmeof.StatusDNR)
			// Unknown namespace and opcode.
			wantStatus(t, "read of NSID 2", do(t, q, rw(false, 2, 0, make([]byte, bs), bs)), nvmeof.StatusInvalidNamespace|nvmeof.StatusDNR)
			r = &rdma.HostRequest{}
			r.SQE.BuildFlush(1)
			r.SQE.SetOpcode(nvmeof.NVMCompare)
			wantStatus(t, "compare", do(t, q, r), nvmeof.StatusInvalidOpcode|nvmeof.StatusDNR)

			// The SMART log counts the commands.
			b, err := h.getLog(nvmeof.LIDSMART, 1, 0, nvmeof.SMARTLogSize)
			if err != nil {
				t.Fatal(err)
			}
			sl, _ := nvmeof.ParseSMARTLog(b)
			if sl.HostWriteCommands().Lo < uint64(len(written)) || sl.HostReadCommands().Lo < uint64(len(written)) || sl.DataUnitsWritten().Lo == 0 {
				t.Fatalf("SMART writes %v reads %v units written %v", sl.HostWriteCommands(), sl.HostReadCommands(), sl.DataUnitsWritten())
			}
		})
	}
}

// TestReadOnlyNamespace: writes to a write-protected namespace fail.
func TestReadOnlyNamespace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ro.img")
	if err := os.WriteFile(path, pattern(1<<20, 3), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, testConfig(t, NamespaceConfig{NSID: 1, Backend: BackendConfig{Kind: "file", Path: path, ReadOnly: true}}))
	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(1)
	b, _ := h.identify(nvmeof.CNSNamespace, 1, 0)
	if id, _ := nvmeof.ParseIdentifyNamespace(b); id.NSATTR()&nvmeof.NSATTRWriteProtected == 0 {
		t.Fatal("NSATTR does not say write protected")
	}
	got := make([]byte, 4096)
	if err := do(t, h.io[0], rw(false, 1, 8, got, 512)); err != nil || !bytes.Equal(got, pattern(1<<20, 3)[4096:8192]) {
		t.Fatalf("read: %v", err)
	}
	wantStatus(t, "write", do(t, h.io[0], rw(true, 1, 0, make([]byte, 512), 512)), nvmeof.StatusNamespaceWriteProtected)
	wz := &rdma.HostRequest{}
	wz.SQE.BuildWriteZeroes(1, 0, 1)
	wantStatus(t, "write zeroes", do(t, h.io[0], wz), nvmeof.StatusNamespaceWriteProtected)
	fl := &rdma.HostRequest{}
	fl.SQE.BuildFlush(1)
	if err := do(t, h.io[0], fl); err != nil {
		t.Fatal(err)
	}
}

// TestManyQueues runs random writes and reads with verification on several
// queues of several controllers at once, each queue with many commands
// outstanding, against a file backend (workers) and a memory one (inline).
func TestManyQueues(t *testing.T) {
	// Also with busy polling on the target's receive loops: eight of them
	// spinning on two CPUs must still serve every queue.
	for _, bp := range []time.Duration{0, 50 * time.Microsecond} {
		t.Run(fmt.Sprintf("busypoll=%v", bp), func(t *testing.T) { testManyQueues(t, bp) })
	}
}

func testManyQueues(t *testing.T, busyPoll time.Duration) {
	const (
		hosts   = 2
		queues  = 4
		depth   = 16
		perQ    = 200
		blocks  = 8 // 4 KiB commands
		regionB = 1 << 20
	)
	cfg := testConfig(t, memNS(1, "64MiB"), NamespaceConfig{NSID: 2, Backend: BackendConfig{Kind: "file", Path: filepath.Join(t.TempDir(), "f.img"), Size: "64MiB"}})
	cfg.Tuning.IOWorkers = 8
	cfg.Transport.BusyPoll = busyPoll
	s := startServer(t, cfg)
	var wg sync.WaitGroup
	errs := make(chan error, hosts*queues)
	for hi := 0; hi < hosts; hi++ {
		h, err := connectHost(t, portAddr(s, 1), testSubNQN, fmt.Sprintf("nqn.2024-01.io.nvmetd.test:host%d", hi), testKATO)
		if err != nil {
			t.Fatal(err)
		}
		h.setup(queues)
		for qi, q := range h.io {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each queue owns a region, so the verification is exact.
				base := uint64((hi*queues + qi) * regionB / 512)
				errs <- hammer(q, uint32(1+qi%2), base, regionB/512, perQ, depth, blocks, uint64(hi*100+qi))
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if st := s.status(); st.Subsystems[0].Namespaces[1].IO.WriteCommands == 0 || st.Subsystems[0].Namespaces[0].IO.ReadCommands == 0 {
		t.Errorf("namespace counters %+v", st.Subsystems[0].Namespaces)
	}
}

// hammer keeps depth random writes and reads outstanding on q within a
// region of nblocks, checking every read against what was written.
func hammer(q *rdma.HostQueue, nsid uint32, base, nblocks uint64, n, depth, blocks int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 1))
	shadow := make([]byte, nblocks*512)
	slots := nblocks / uint64(blocks)
	busy := map[uint64]bool{}
	type op struct {
		r    *rdma.HostRequest
		slot uint64
	}
	done := make(chan *rdma.HostRequest, depth)
	inflight := map[*rdma.HostRequest]op{}
	var firstErr error
	submitted := 0
	for submitted < n || len(inflight) > 0 {
		for submitted < n && len(inflight) < depth {
			slot := rng.Uint64N(slots)
			if busy[slot] {
				continue
			}
			busy[slot] = true
			off := slot * uint64(blocks) * 512
			var r *rdma.HostRequest
			if rng.IntN(2) == 0 {
				data := make([]byte, blocks*512)
				for i := range data {
					data[i] = byte(rng.Uint32())
				}
				copy(shadow[off:], data)
				r = rw(true, nsid, base+slot*uint64(blocks), data, 512)
			} else {
				r = rw(false, nsid, base+slot*uint64(blocks), make([]byte, blocks*512), 512)
			}
			r.Done = func(r *rdma.HostRequest) { done <- r }
			if err := q.Submit(r); err != nil {
				return err
			}
			inflight[r] = op{r, slot}
			submitted++
		}
		r := <-done
		o := inflight[r]
		delete(inflight, r)
		delete(busy, o.slot)
		if err := r.Status(); err != nil && firstErr == nil {
			firstErr = err
		}
		off := o.slot * uint64(blocks) * 512
		if !r.Write && firstErr == nil && !bytes.Equal(r.Data, shadow[off:off+uint64(blocks)*512]) {
			firstErr = fmt.Errorf("queue %d: read of slot %d differs from what was written", q.QID(), o.slot)
		}
	}
	return firstErr
}

// loopDevice attaches a loop device over a sparse file of size bytes for
// the test.
func loopDevice(t testing.TB, size int64, blockSize uint32) string {
	dev, _ := backendtest.LoopDevice(t, size, blockSize)
	return dev
}
