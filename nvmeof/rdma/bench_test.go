package rdma

import (
	"fmt"
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
	}{
		{false, 4096, 1}, {false, 4096, 32}, {false, 128 << 10, 8},
		{true, 4096, 1}, {true, 4096, 32}, {true, 128 << 10, 8},
	} {
		op := "read"
		if tc.write {
			op = "write"
		}
		b.Run(fmt.Sprintf("%s/%dKiB/qd%d", op, tc.size>>10, tc.qd), func(b *testing.B) {
			ln := serve(b, ControllerConfig{}, nullCtrl{})
			q := dialQ(b, ln.Addr().String(), HostConfig{QID: 1, QueueSize: 128, InlineDataSize: DefaultInlineDataSize})
			done := make(chan *HostRequest, tc.qd)
			reqs := make([]*HostRequest, tc.qd)
			for i := range reqs {
				r := &HostRequest{Data: make([]byte, tc.size), Write: tc.write, Done: func(r *HostRequest) { done <- r }}
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
			inflight := 0
			for i := 0; i < b.N; i++ {
				var r *HostRequest
				if inflight < tc.qd {
					r = reqs[inflight]
				} else {
					r = <-done
					inflight--
					if r.Err != nil || r.CQE.Status() != nvmeof.StatusSuccess {
						b.Fatal(r.Status())
					}
				}
				if err := q.Submit(r); err != nil {
					b.Fatal(err)
				}
				inflight++
			}
			for ; inflight > 0; inflight-- {
				<-done
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "IOPS")
		})
	}
}
