package connd

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/initiator/bench"
	"github.com/nvmetd/nvmetd/internal/metricserve"
	"github.com/nvmetd/nvmetd/internal/testing/testnode"
)

// family finds a metric of a gathered family by its label values.
func family(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.Metric {
			for k, v := range labels {
				found := false
				for _, l := range m.Label {
					if l.GetName() == k && l.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			return m
		}
	}
	t.Fatalf("no %s%v in the scrape", name, labels)
	return nil
}

func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	m := family(t, reg, name, labels)
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("%s is not a counter or gauge", name)
	return 0
}

// histDelta is the cumulative bucket counts of b minus a's.
func histDelta(a, b *dto.Histogram) (bounds []float64, cum []uint64) {
	for i, bk := range b.Bucket {
		bounds = append(bounds, bk.GetUpperBound())
		cum = append(cum, bk.GetCumulativeCount()-a.Bucket[i].GetCumulativeCount())
	}
	return bounds, cum
}

// bucketOf is the index of the bucket that holds the q-quantile.
func bucketOf(cum []uint64, total uint64, q float64) int {
	rank := uint64(math.Ceil(q * float64(total)))
	for i, c := range cum {
		if c >= rank {
			return i
		}
	}
	return len(cum)
}

// TestMetricsDuringBench scrapes the target's metrics endpoint while a
// verified bench runs, and checks them against what the bench did: its commands and
// bytes exactly, nothing left in flight, and the latency: every command's
// time at the target lies inside its time at the host, so the target's
// p50 cannot lie above the bucket of the bench's own p50.
func TestMetricsDuringBench(t *testing.T) {
	const nqn = "nqn.2024-01.io.nvmetd.test:metrics"
	tg, addr := testnode.MemoryTarget(t, nqn, "16MiB")
	ctx := context.Background()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(tg.MetricsCollector(0))

	msub := initiator.NewSubsystem(nqn, initiator.MultipathConfig{})
	defer msub.Close(ctx)
	path, err := msub.AddPath(ctx, initiator.Config{Address: addr, SubNQN: nqn,
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000000ab", HostID: [16]byte{2}, NrIOQueues: 2, QueueSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	c := path.Controller()
	ns := msub.Namespace(1)
	hreg := prometheus.NewPedanticRegistry()
	hreg.MustRegister(&hostCollector{ctrl: c, subnqn: nqn, traddr: "127.0.0.1"})
	hostHist := func() *dto.Histogram {
		// Both I/O queues' read latency, summed.
		var sum *dto.Histogram
		for _, qid := range []string{"1", "2"} {
			h := family(t, hreg, "nvmeof_host_queue_latency_seconds", map[string]string{"qid": qid, "op": "read"}).Histogram
			if sum == nil {
				sum = &dto.Histogram{SampleCount: new(uint64)}
				for _, b := range h.Bucket {
					sum.Bucket = append(sum.Bucket, &dto.Bucket{UpperBound: b.UpperBound, CumulativeCount: new(uint64)})
				}
			}
			*sum.SampleCount += h.GetSampleCount()
			for i, b := range h.Bucket {
				*sum.Bucket[i].CumulativeCount += b.GetCumulativeCount()
			}
		}
		return sum
	}
	hostReads := func() float64 {
		return value(t, hreg, "nvmeof_host_queue_commands_total", map[string]string{"qid": "1", "op": "read"}) +
			value(t, hreg, "nvmeof_host_queue_commands_total", map[string]string{"qid": "2", "op": "read"})
	}
	sub := map[string]string{"subsystem": nqn}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"subsystem": nqn}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cmds := func(op string) float64 {
		return value(t, reg, "nvmetd_subsystem_commands_total", with("opcode", op, "status", "success"))
	}
	bytes := func(dir string) float64 { return value(t, reg, "nvmetd_subsystem_bytes_total", with("direction", dir)) }

	// The endpoint (the daemons' own server) is scraped over HTTP all
	// along (the race detector checks the collector against the data
	// path); the checks below read the same registry.
	srv, err := metricserve.Start(metricserve.Config{Address: "127.0.0.1:0"}, reg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	url := fmt.Sprintf("http://%s/metrics", srv.Addr())
	stop, first := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	scrapes := 0
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := client.Get(url)
			if err != nil {
				t.Errorf("scrape during the bench: %v", err)
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `nvmetd_subsystem_commands_total{opcode="write"`) {
				t.Errorf("scrape during the bench: HTTP %d, %v:\n%.2000s", resp.StatusCode, err, body)
				return
			}
			if scrapes++; scrapes == 1 {
				close(first)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	select { // the benches start once the endpoint answers
	case <-first:
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("no scrape answered")
	}

	// A verified write bench: writes, then the read-back that checks them.
	w0, wb0, r0 := cmds("write"), bytes("write"), cmds("read")
	res, err := bench.Run(ctx, ns, bench.Params{RW: "randwrite", BS: 8192, IODepth: 16, Runtime: 300 * time.Millisecond, Size: 8 << 20, Verify: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.VerifyErrors != 0 || res.Verified == 0 || res.Write == nil {
		t.Fatalf("bench: %+v", res)
	}
	if got := cmds("write") - w0; got != float64(res.Write.IOs) {
		t.Errorf("write commands: target counted %v, the bench did %d", got, res.Write.IOs)
	}
	if got := bytes("write") - wb0; got != float64(res.Write.Bytes) {
		t.Errorf("write bytes: target counted %v, the bench wrote %d", got, res.Write.Bytes)
	}
	if cmds("read") == r0 {
		t.Errorf("the verification read-back left no read commands")
	}

	// A read bench: reads and bytes exactly, and the latency.
	h0 := family(t, reg, "nvmetd_subsystem_command_latency_seconds", with("op", "read")).Histogram
	hh0, hr0 := hostHist(), hostReads()
	r0, rb0 := cmds("read"), bytes("read")
	res, err = bench.Run(ctx, ns, bench.Params{RW: "randread", BS: 4096, IODepth: 8, Runtime: 300 * time.Millisecond, Size: 8 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if res.Errors != 0 || res.Read == nil || res.Read.IOs == 0 {
		t.Fatalf("bench: %+v", res)
	}
	if got := cmds("read") - r0; got != float64(res.Read.IOs) {
		t.Errorf("read commands: target counted %v, the bench did %d", got, res.Read.IOs)
	}
	if got := bytes("read") - rb0; got != float64(res.Read.Bytes) {
		t.Errorf("read bytes: target counted %v, the bench read %d", got, res.Read.Bytes)
	}
	if got := value(t, reg, "nvmetd_subsystem_inflight_commands", sub); got != 0 {
		t.Errorf("in flight after the bench: %v", got)
	}
	for qid := range []int{1, 2} {
		if got := value(t, reg, "nvmetd_queue_inflight_commands", with("qid", fmt.Sprint(qid+1))); got != 0 {
			t.Errorf("qid %d in flight after the bench: %v", qid+1, got)
		}
	}
	h1 := family(t, reg, "nvmetd_subsystem_command_latency_seconds", with("op", "read")).Histogram
	bounds, cum := histDelta(h0, h1)
	n := h1.GetSampleCount() - h0.GetSampleCount()
	if n != res.Read.IOs {
		t.Errorf("latency histogram: %d reads, the bench did %d", n, res.Read.IOs)
	}
	p50 := bucketOf(cum, n, 0.5)
	benchP50 := res.Read.LatP50 / 1e6 // seconds
	benchBucket := len(bounds)
	for i, b := range bounds {
		if benchP50 <= b {
			benchBucket = i
			break
		}
	}
	lo := 0.0
	if p50 > 0 {
		lo = bounds[p50-1]
	}
	t.Logf("%d scrapes; reads: %d; target p50 in (%.1f, %.1f] µs, bench p50 %.1f µs (bucket %d); bench p99 %.1f µs",
		scrapes, n, lo*1e6, bounds[min(p50, len(bounds)-1)]*1e6, res.Read.LatP50, benchBucket, res.Read.LatP99)
	// The bench's p50 is the middle of its own fine bucket (under 1 %
	// wide): one bucket of slack for that.
	if p50 > benchBucket+1 {
		t.Errorf("target p50 bucket %d (≤ %.1f µs) above the bench's p50 %.1f µs (bucket %d): the target cannot take longer than the host sees",
			p50, bounds[min(p50, len(bounds)-1)]*1e6, res.Read.LatP50, benchBucket)
	}
	if p50 >= len(bounds) {
		t.Errorf("target p50 bucket %d: at the edge of the histogram", p50)
	}

	// The host's own histogram (nvmeof connect --metrics-listen) sees the
	// same reads, each from its send to its completion: inside the bench's
	// time for it, around the target's. Its p50 lies between the two, and
	// in the bench's power-of-two band (4 buckets an octave).
	if got := hostReads() - hr0; got != float64(res.Read.IOs) {
		t.Errorf("host metrics: %v reads, the bench did %d", got, res.Read.IOs)
	}
	for _, qid := range []string{"0", "1", "2"} {
		if v := value(t, hreg, "nvmeof_host_qp_state", map[string]string{"qid": qid, "state": "rts"}); v != 1 {
			t.Errorf("host qid %s: QP state rts %v", qid, v)
		}
		if v := value(t, hreg, "nvmeof_host_qp_fpdus_total", map[string]string{"qid": qid, "direction": "sent"}); v == 0 {
			t.Errorf("host qid %s: no FPDUs sent", qid)
		}
		family(t, hreg, "nvmeof_host_qp_tcp_rtt_seconds", map[string]string{"qid": qid})
	}
	hb, hcum := histDelta(hh0, hostHist())
	_ = hb
	hp50 := bucketOf(hcum, n, 0.5)
	t.Logf("host p50 bucket %d (≤ %.1f µs), target %d, bench %d", hp50, bounds[min(hp50, len(bounds)-1)]*1e6, p50, benchBucket)
	if hp50 > benchBucket+1 || hp50 < benchBucket-4 {
		t.Errorf("host p50 bucket %d (≤ %.1f µs) outside the bench's p50 band (%.1f µs, bucket %d)", hp50, bounds[min(hp50, len(bounds)-1)]*1e6, res.Read.LatP50, benchBucket)
	}
	if hp50+1 < p50 {
		t.Errorf("host p50 bucket %d below the target's %d", hp50, p50)
	}
	_ = initiator.OpRead
}
