package rdma

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// nullCtrl completes I/O at once with no data movement beyond the RDMA
// transfers: the binding's own cost.
type nullCtrl struct{}

func (nullCtrl) HandleCommand(r *Request) {
	if r.SQE().Opcode() == nvmeof.NVMWrite {
		r.FetchData()
		return
	}
	r.Complete(nvmeof.StatusSuccess)
}
func (nullCtrl) DataReady(r *Request, err error) {
	if err != nil {
		r.Complete(nvmeof.StatusDataTransferError)
		return
	}
	r.Complete(nvmeof.StatusSuccess)
}
func (nullCtrl) QueueClosed(*ControllerQueue, error) {}

// BenchmarkIO measures commands per second through one host queue and one
// controller queue over loopback: reads and writes of 4 KiB at queue depth
// 1 and 32, and 128 KiB at depth 8.
func BenchmarkIO(b *testing.B) {
	for _, tc := range []struct {
		write bool
		size  int
		qd    int
		poll  time.Duration
	}{
		{false, 4096, 1, 0}, {false, 4096, 32, 0}, {false, 128 << 10, 8, 0},
		{true, 4096, 1, 0}, {true, 4096, 32, 0}, {true, 128 << 10, 8, 0},
		{false, 4096, 1, 50 * time.Microsecond},
	} {
		op := "read"
		if tc.write {
			op = "write"
		}
		name := fmt.Sprintf("%s/%dKiB/qd%d", op, tc.size>>10, tc.qd)
		if tc.poll > 0 {
			name += "/busypoll"
		}
		b.Run(name, func(b *testing.B) {
			tr := TransportConfig{BusyPoll: tc.poll}
			ln := serve(b, ControllerConfig{Transport: tr}, nullCtrl{})
			q := dialQ(b, ln.Addr().String(), HostConfig{QID: 1, QueueSize: 128, InlineDataSize: DefaultInlineDataSize, Transport: tr})
			// As spdk_nvme_perf: each completion submits the next command
			// from the completion callback (the queue's receive goroutine).
			var issued atomic.Int64
			var wg sync.WaitGroup
			var failed atomic.Value
			n := int64(b.N)
			next := func(r *HostRequest) {
				if r.Err != nil || r.CQE.Status() != nvmeof.StatusSuccess {
					failed.Store(r.Status())
				}
				if issued.Add(1) > n {
					wg.Done()
					return
				}
				if err := q.Submit(r); err != nil {
					failed.Store(err)
					wg.Done()
				}
			}
			reqs := make([]*HostRequest, tc.qd)
			for i := range reqs {
				r := &HostRequest{Data: make([]byte, tc.size), Write: tc.write, Done: next}
				if tc.write {
					r.SQE.BuildWrite(1, 0, uint32(tc.size/512))
				} else {
					r.SQE.BuildRead(1, 0, uint32(tc.size/512))
				}
				reqs[i] = r
			}
			b.SetBytes(int64(tc.size))
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			wg.Add(tc.qd)
			for _, r := range reqs {
				if issued.Add(1) > n {
					wg.Done()
					continue
				}
				if err := q.Submit(r); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
			if err := failed.Load(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "IOPS")
		})
	}
}
