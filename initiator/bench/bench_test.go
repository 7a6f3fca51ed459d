package bench

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/internal/testing/testnode"
)

// TestHistogram: the buckets are monotonic and give back every value
// within 1 %.
func TestHistogram(t *testing.T) {
	prev := -1
	for v := uint64(0); v < 1<<20; v += 1 + v/97 {
		i := histIndex(v)
		if i < prev {
			t.Fatalf("index not monotonic at %d", v)
		}
		prev = i
		got := histValue(i)
		if diff := float64(got) - float64(v); diff*diff > (0.01*float64(v)+1)*(0.01*float64(v)+1) {
			t.Fatalf("value %d comes back as %d", v, got)
		}
	}
	if i := histIndex(^uint64(0)); i >= len(hist{}.counts) {
		t.Fatalf("index %d out of the array", i)
	}
	var h hist
	for i := 1; i <= 1000; i++ {
		h.record(uint64(i) * 1000)
	}
	for _, c := range []struct {
		p    float64
		want uint64
	}{{50, 500000}, {99, 990000}, {99.9, 999000}} {
		got := h.percentile(c.p)
		if d := float64(got)/float64(c.want) - 1; d > 0.01 || d < -0.01 {
			t.Errorf("p%v = %d, want about %d", c.p, got, c.want)
		}
	}
	if h.minimum() != 1000 || h.max.Load() != 1000000 || h.mean() != 500500 {
		t.Errorf("min %d max %d mean %v", h.minimum(), h.max.Load(), h.mean())
	}
	if a := testing.AllocsPerRun(1000, func() { h.record(12345) }); a != 0 {
		t.Errorf("record allocates %v", a)
	}
}

// TestBenchVerify runs the load generator with verification against the
// target (in this process, a memory namespace), for every pattern.
func TestBenchVerify(t *testing.T) {
	const nqn = "nqn.2024-01.io.nvmetd.test:bench"
	_, addr := testnode.MemoryTarget(t, nqn, "16MiB")
	ctx := context.Background()
	sub := initiator.NewSubsystem("nqn.2024-01.io.nvmetd.test:bench", initiator.MultipathConfig{})
	defer sub.Close(ctx)
	_, err := sub.AddPath(ctx, initiator.Config{Address: addr, SubNQN: "nqn.2024-01.io.nvmetd.test:bench",
		HostNQN: "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000000aa", HostID: [16]byte{1}, NrIOQueues: 2, QueueSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	ns := sub.Namespace(1)
	for _, rw := range []string{"read", "write", "randread", "randwrite", "rw", "randrw"} {
		p := Params{RW: rw, BS: 4096 << rand.IntN(4), IODepth: 16, RWMixRead: 70, Runtime: 300 * time.Millisecond, Size: 8 << 20, Verify: true}
		var lines int
		res, err := Run(ctx, ns, p, func(string) { lines++ })
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors != 0 || res.VerifyErrors != 0 || res.Total.IOs == 0 || res.Verified == 0 {
			t.Fatalf("%s: %+v", rw, res)
		}
		if (res.Read == nil) != (rw == "write" || rw == "randwrite") || (res.Write == nil) != (rw == "read" || rw == "randread") {
			t.Fatalf("%s: read %v write %v", rw, res.Read, res.Write)
		}
		var b bytes.Buffer
		Report(&b, res)
		t.Logf("%s bs %d: %s", rw, p.BS, strings.ReplaceAll(strings.TrimSpace(b.String()), "\n", " |"))
	}
	// A corrupted block is found.
	p := Params{RW: "randread", BS: 4096, IODepth: 4, Runtime: 300 * time.Millisecond, Size: 1 << 20, Verify: true, Seed: 9}
	if _, err := Run(ctx, ns, p, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.WriteAt(make([]byte, 4096), 8192); err != nil {
		t.Fatal(err)
	}
	// A sequential read from offset 0 reaches the block within its first
	// I/Os, however slow the machine (a random read of a few hundred
	// milliseconds may miss it: 48 I/Os of 256 blocks under -race and load).
	p.Prefilled = true
	p.RW = "read"
	res, err := Run(ctx, ns, p, nil)
	if err != nil || res.VerifyErrors == 0 {
		t.Fatalf("the zeroed block was not noticed: %+v %v", res, err)
	}
}
