package target

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nvmetd/nvmetd/internal/lathist"
	"github.com/nvmetd/nvmetd/internal/testing/rawpeer"
	"github.com/nvmetd/nvmetd/iwarp/wire"
	"github.com/nvmetd/nvmetd/nvmeof"
)

func TestLatIndex(t *testing.T) {
	for i, b := range latBounds {
		ns := time.Duration(math.Round(b * 1e9))
		if got := latIndex(ns); got != i && !(got == i+1 && float64(ns) > b*1e9) {
			t.Errorf("latIndex(%v) = %d, want %d (bound %g s)", ns, got, i, b)
		}
		if got := latIndex(ns + ns/50 + 1); got != min(i+1, latBuckets) {
			t.Errorf("latIndex(%v) = %d, want %d", ns+ns/50+1, got, i+1)
		}
	}
	if latIndex(0) != 0 || latIndex(100*time.Nanosecond) != 0 || latIndex(time.Hour) != latBuckets {
		t.Errorf("latIndex ends: %d %d %d", latIndex(0), latIndex(100*time.Nanosecond), latIndex(time.Hour))
	}
	if d := time.Duration(latBounds[latBuckets-1] * 1e9); d < 10*time.Second {
		t.Errorf("last bound %v, want at least 10 s", d)
	}
	var h histSnap
	h.B[latIndex(10*time.Microsecond)] = 100
	if q := h.Quantile(0.5); q < 8*time.Microsecond || q > 11*time.Microsecond {
		t.Errorf("p50 of 100 values of 10 µs: %v", q)
	}
}

// scrape gathers reg into "name{k=v,...}" → value (histograms: _count and
// _sum, and the snapshot under the bare key).
func scrape(t testing.TB, reg *prometheus.Registry) (map[string]float64, map[string]*dto.Histogram) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	vals, hists := map[string]float64{}, map[string]*dto.Histogram{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			var lv []string
			for _, l := range m.Label {
				lv = append(lv, l.GetName()+"="+l.GetValue())
			}
			slices.Sort(lv)
			key := mf.GetName() + "{" + strings.Join(lv, ",") + "}"
			switch {
			case m.Counter != nil:
				vals[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				vals[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				hists[key] = m.Histogram
				vals[mf.GetName()+"_count{"+strings.Join(lv, ",")+"}"] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return vals, hists
}

// normKey sorts the labels of a scrape key.
func normKey(k string) string {
	name, labels, _ := strings.Cut(strings.TrimSuffix(k, "}"), "{")
	lv := strings.Split(labels, ",")
	slices.Sort(lv)
	return name + "{" + strings.Join(lv, ",") + "}"
}

func metricsRegistry(t testing.TB, s *server) *prometheus.Registry {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register((&Target{s: s}).MetricsCollector(0)); err != nil {
		t.Fatal(err)
	}
	return reg
}

func TestMetricsCommands(t *testing.T) {
	s := startServer(t, testConfig(t, memNS(1, "4MiB")))
	reg := metricsRegistry(t, s)
	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(1)
	const reads, writes, bs = 37, 23, 4096
	buf := make([]byte, bs)
	for i := range writes {
		if err := do(t, h.io[0], rw(true, 1, uint64(i), buf, 512)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range reads {
		if err := do(t, h.io[0], rw(false, 1, uint64(i), buf, 512)); err != nil {
			t.Fatal(err)
		}
	}
	// One failing read: beyond the namespace (LBA Out of Range, generic).
	wantStatus(t, "read beyond the end", do(t, h.io[0], rw(false, 1, 1<<40, buf, 512)), nvmeof.StatusLBAOutOfRange|nvmeof.StatusDNR)

	v, hs := scrape(t, reg)
	sub := "subsystem=" + testSubNQN
	ctrl := fmt.Sprintf("cntlid=%d,host=%s,%s", h.cntlid, h.nqn, sub)
	queue := fmt.Sprintf("cntlid=%d,qid=1,%s", h.cntlid, sub)
	want := map[string]float64{
		"nvmetd_subsystem_commands_total{opcode=read,status=success," + sub + "}":   reads,
		"nvmetd_subsystem_commands_total{opcode=write,status=success," + sub + "}":  writes,
		"nvmetd_subsystem_commands_total{opcode=read,status=generic," + sub + "}":   1,
		"nvmetd_subsystem_bytes_total{direction=read," + sub + "}":                  reads * bs,
		"nvmetd_subsystem_bytes_total{direction=write," + sub + "}":                 writes * bs,
		"nvmetd_subsystem_inflight_commands{" + sub + "}":                           0,
		"nvmetd_subsystem_controllers{" + sub + "}":                                 1,
		"nvmetd_subsystem_command_latency_seconds_count{op=read," + sub + "}":       reads + 1,
		"nvmetd_subsystem_command_latency_seconds_count{op=write," + sub + "}":      writes,
		"nvmetd_controller_commands_total{" + ctrl + ",opcode=read,status=success}": reads,
		"nvmetd_controller_bytes_total{" + ctrl + ",direction=write}":               writes * bs,
		"nvmetd_controller_io_queues{" + ctrl + "}":                                 1,
		"nvmetd_controller_command_latency_seconds_count{" + ctrl + ",op=read}":     reads + 1,
		"nvmetd_queue_commands_total{" + queue + ",opcode=read,status=success}":     reads,
		"nvmetd_queue_commands_total{" + queue + ",opcode=write,status=success}":    writes,
		"nvmetd_queue_inflight_commands{" + queue + "}":                             0,
		"nvmetd_queue_size{" + queue + "}":                                          32,
		"nvmetd_qp_state{" + queue + ",state=rts}":                                  1,
		"nvmetd_namespace_commands_total{nsid=1,op=read," + sub + "}":               reads,
		"nvmetd_namespace_bytes_total{direction=write,nsid=1," + sub + "}":          writes * bs,
		"nvmetd_namespace_state{nsid=1,state=online," + sub + "}":                   1,
		"nvmetd_namespace_size_bytes{nsid=1," + sub + "}":                           4 << 20,
		"nvmetd_backend_latency_seconds_count{nsid=1,op=read," + sub + "}":          reads,
		"nvmetd_controllers_created_total{" + sub + "}":                             1,
		"nvmetd_port_listening{address=" + portAddr(s, 1) + ",port=1}":              1,
	}
	for k, w := range want {
		k = normKey(k)
		if got, ok := v[k]; !ok {
			t.Errorf("%s missing", k)
		} else if got != w {
			t.Errorf("%s = %v, want %v", k, got, w)
		}
	}
	for _, k := range []string{"nvmetd_backend_allocated_bytes{nsid=1," + sub + "}", "nvmetd_qp_tcp_rtt_seconds{" + queue + "}", "nvmetd_qp_fpdus_total{" + queue + ",direction=received}", "nvmetd_port_fpdus_total{direction=sent,port=1}"} {
		if k = normKey(k); v[k] <= 0 {
			t.Errorf("%s = %v, want > 0", k, v[k])
		}
	}
	if t.Failed() {
		var keys []string
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		t.Logf("scrape:\n%s", strings.Join(keys, "\n"))
	}
	hr := hs["nvmetd_subsystem_command_latency_seconds{op=read,"+sub+"}"]
	if hr == nil || len(hr.Bucket) != lathist.ExportBuckets {
		t.Fatalf("read latency histogram: %v", hr)
	}

	// Closed queues stay counted in the subsystem.
	h.close()
	waitFor(t, "controller gone", hang, func() bool { return len(s.allControllers()) == 0 })
	v, _ = scrape(t, reg)
	if got := v["nvmetd_subsystem_commands_total{opcode=read,status=success,"+sub+"}"]; got != reads {
		t.Errorf("after disconnect: reads %v, want %d", got, reads)
	}
	if got := v["nvmetd_controllers_ended_total{reason=admin_queue_disconnected,"+sub+"}"]; got != 1 {
		t.Errorf("controllers ended: %v", got)
	}
}

// A bad peer's Terminate shows in its counter: an RDMA Write to an STag the
// target never advertised (RFC 5041 §7.2: DDP tagged buffer error,
// invalid STag) and an FPDU with a bad MPA CRC.
func TestMetricsTerminate(t *testing.T) {
	s := startServer(t, testConfig(t, memNS(1, "1MiB")))
	reg := metricsRegistry(t, s)
	addr := portAddr(s, 1)
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()

	q, err := rawpeer.DialQueue(ctx, addr, rawpeer.QueueRequest(rawpeer.CMRequest(0, 32)), rawpeer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.SendTagged(wire.OpWrite, 0x12345600, 0, make([]byte, 64), time.Now().Add(hang)); err != nil {
		t.Fatal(err)
	}
	if how, frames := q.WaitClosed(time.Now().Add(hang)); len(rawpeer.Terminates(frames)) != 1 {
		t.Fatalf("connection %v without a Terminate", how)
	}

	req := rawpeer.QueueRequest(rawpeer.CMRequest(0, 32))
	req.CRC = true
	q2, err := rawpeer.DialQueue(ctx, addr, req, rawpeer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q2.Close()
	if !q2.CRC {
		t.Fatal("MPA CRC not negotiated")
	}
	sqe, data := q2.ConnectSQE(rawpeer.ConnectData(testSubNQN, testHostNQN, [16]byte{1}, 0xFFFF), 0, true)
	fr := q2.Frame(rawpeer.Untagged(wire.OpSend, true, 0, 0, q2.NextMSN(0), 0, append(sqe[:], data...)))
	fr[len(fr)-1] ^= 0xFF // the CRC
	if err := q2.WriteRaw(fr); err != nil {
		t.Fatal(err)
	}
	if how, frames := q2.WaitClosed(time.Now().Add(hang)); len(rawpeer.Terminates(frames)) != 1 {
		t.Fatalf("connection %v without a Terminate", how)
	}
	waitFor(t, "queues closed", hang, func() bool { return len(s.allQueues()) == 0 })

	v, _ := scrape(t, reg)
	invalid := wire.CauseDDPTaggedInvalidSTag
	for k, w := range map[string]float64{
		fmt.Sprintf("nvmetd_iwarp_terminates_total{code=0x%02x,direction=sent,layer=ddp,port=1,type=%d}", invalid.Code(), invalid.Type()):                   1,
		fmt.Sprintf("nvmetd_iwarp_terminates_total{code=0x%02x,direction=sent,layer=mpa,port=1,type=%d}", wire.CauseLLPCRC.Code(), wire.CauseLLPCRC.Type()): 1,
		"nvmetd_mpa_crc_errors_total{port=1}": 1,
	} {
		if got := v[k]; got != w {
			t.Errorf("%s = %v, want %v", k, got, w)
		}
	}
	if t.Failed() {
		for k, x := range v {
			if strings.Contains(k, "terminate") || strings.Contains(k, "crc") {
				t.Logf("%s = %v", k, x)
			}
		}
	}
}

func TestMetricsConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		m     MetricsConfig
		field string // "" valid
	}{
		{MetricsConfig{}, ""},
		{MetricsConfig{Address: "127.0.0.1:9469"}, ""},
		{MetricsConfig{Address: ":9469"}, ""},
		{MetricsConfig{Socket: "/run/nvmetd/metrics.sock"}, ""},
		{MetricsConfig{Address: "127.0.0.1:9469", TLSCert: "/c", TLSKey: "/k", BasicAuthUser: "p", BasicAuthPasswordFile: "/pw"}, ""},
		{MetricsConfig{Address: "localhost:9469"}, "metrics.address"},
		{MetricsConfig{Address: "127.0.0.1"}, "metrics.address"},
		{MetricsConfig{Address: "127.0.0.1:70000"}, "metrics.address"},
		{MetricsConfig{Address: ":1", Socket: "/s"}, "metrics.socket"},
		{MetricsConfig{Socket: "rel.sock"}, "metrics.socket"},
		{MetricsConfig{Address: ":1", Path: "metrics"}, "metrics.path"},
		{MetricsConfig{Address: ":1", TLSCert: "/c"}, "metrics.tls_key"},
		{MetricsConfig{Address: ":1", TLSKey: "/k"}, "metrics.tls_cert"},
		{MetricsConfig{Address: ":1", BasicAuthUser: "p"}, "metrics.basic_auth_password_file"},
		{MetricsConfig{Address: ":1", BasicAuthUser: "a:b", BasicAuthPasswordFile: "/pw"}, "metrics.basic_auth_user"},
		{MetricsConfig{TLSCert: "/c", TLSKey: "/k"}, "metrics.address"},
		{MetricsConfig{Address: ":1", MaxControllers: -1}, "metrics.max_controllers"},
	} {
		cfg := &Config{Metrics: tc.m}
		err := cfg.Validate()
		if tc.field == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.m, err)
			}
			continue
		}
		ve, ok := err.(*ValidationError)
		if !ok || !slices.ContainsFunc(ve.Problems, func(p *FieldError) bool { return p.Field == tc.field }) {
			t.Errorf("%+v: %v, want a problem with %s", tc.m, err, tc.field)
		}
	}
	// Check opens the key pair and the password file.
	dir := t.TempDir()
	cfg := &Config{Metrics: MetricsConfig{Address: ":1", TLSCert: dir + "/none.crt", TLSKey: dir + "/none.key", BasicAuthUser: "p", BasicAuthPasswordFile: dir + "/none"}}
	err := cfg.Check()
	ve, ok := err.(*ValidationError)
	if !ok || len(ve.Problems) != 2 || ve.Problems[0].Field != "metrics.tls_cert" || ve.Problems[1].Field != "metrics.basic_auth_password_file" {
		t.Errorf("Check: %v", err)
	}
}

// BenchmarkMetricsRecord is what the metrics add to each command on the
// data path: the arrival time, the classification and the counters with
// the latency histogram (and, for NVM commands, the backend call's
// latency). 0 allocations.
func BenchmarkMetricsRecord(b *testing.B) {
	var q cmdStats
	var ns nsStats
	var sqe nvmeof.SQE
	sqe.BuildRead(1, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		t0 := time.Now()
		ns.observe(sqe.Opcode(), time.Since(t0))
		q.record(classifyOp(1, &sqe), classifyStatus(nvmeof.StatusSuccess), 4096, time.Since(start), true)
	}
}

// TestMetricsBackendPaths: a page-cache file namespace counts the reads
// served at once from the page cache, in the metrics and in the status.
func TestMetricsBackendPaths(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	s := startServer(t, testConfig(t, NamespaceConfig{NSID: 1, Backend: BackendConfig{Kind: "file", Path: path, Size: "4MiB"}}))
	reg := metricsRegistry(t, s)
	h := mustConnect(t, portAddr(s, 1), testSubNQN)
	h.setup(1)
	defer h.close()
	const n, bs = 16, 4096
	buf := make([]byte, bs)
	for i := range n {
		if err := do(t, h.io[0], rw(true, 1, uint64(i*8), buf, 512)); err != nil {
			t.Fatal(err)
		}
	}
	// Just written: in the page cache, so every read is done at once.
	for i := range n {
		if err := do(t, h.io[0], rw(false, 1, uint64(i*8), buf, 512)); err != nil {
			t.Fatal(err)
		}
	}
	v, _ := scrape(t, reg)
	sub := "subsystem=" + testSubNQN
	done := v[normKey("nvmetd_backend_nowait_total{nsid=1,result=done,"+sub+"}")]
	missed, ok := v[normKey("nvmetd_backend_nowait_total{nsid=1,result=missed,"+sub+"}")]
	if done < n || !ok {
		t.Errorf("nvmetd_backend_nowait_total: done %v (want ≥ %d reads), missed %v (present %v)", done, n, missed, ok)
	}
	for _, p := range []string{"bounce_read", "bounce_write", "zero_fallback"} {
		k := normKey("nvmetd_backend_slow_path_total{nsid=1,path=" + p + "," + sub + "}")
		if got, ok := v[k]; !ok || got != 0 {
			t.Errorf("%s = %v (present %v), want 0", k, got, ok)
		}
	}
	if _, ok := v[normKey("nvmetd_backend_allocated_bytes{nsid=1,"+sub+"}")]; ok {
		t.Error("nvmetd_backend_allocated_bytes on a file namespace")
	}
	st := s.status()
	bst := st.Subsystems[0].Namespaces[0].Backend.Stats
	if bst == nil || float64(bst.NowaitDone) != done || float64(bst.NowaitMissed) != missed {
		t.Errorf("status backend stats %+v, want nowait_done %v, nowait_missed %v as scraped", bst, done, missed)
	}
}
