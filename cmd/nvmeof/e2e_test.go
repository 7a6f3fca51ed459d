package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/initiator/hostfs"
)

// writeTree writes n files of random sizes (up to maxSize) in nested
// directories under root, fsyncing each, and returns their SHA-256 by
// relative path.
func writeTree(t *testing.T, root string, n, maxSize int, seed uint64) map[string]string {
	t.Helper()
	rng := mrand.New(mrand.NewPCG(seed, 1))
	sums := map[string]string{}
	for i := 0; i < n; i++ {
		rel := filepath.Join(fmt.Sprintf("d%d", i%7), fmt.Sprintf("e%d", i%3), fmt.Sprintf("f%04d", i))
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, rng.IntN(maxSize)+1)
		rand.Read(data)
		if err := writeFileSync(p, data); err != nil {
			t.Fatal(err)
		}
		s := sha256.Sum256(data)
		sums[rel] = hex.EncodeToString(s[:])
	}
	return sums
}

func writeFileSync(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// checkTree verifies the files of sums under root.
func checkTree(t *testing.T, root string, sums map[string]string) {
	t.Helper()
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	bad := 0
	for _, rel := range keys {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			bad++
			continue
		}
		s := sha256.Sum256(data)
		if hex.EncodeToString(s[:]) != sums[rel] {
			t.Errorf("%s: content differs", rel)
			bad++
		}
		if bad > 10 {
			t.Fatal("too many bad files")
		}
	}
}

// TestE2EConnectMountDisconnectReconnect is the acceptance cycle against
// nvmetd: connect and mount (mkfs), write a tree of files, unmount and
// disconnect, reconnect and mount, verify.
func TestE2EConnectMountDisconnectReconnect(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	tg := startNvmetd(e, freePort(t), "256MiB")
	host, port := "127.0.0.1", strings.TrimPrefix(tg.addr, "127.0.0.1:")
	mnt := filepath.Join(e.dir, "mnt")

	out := e.must("discover", "-t", "rdma", "-a", host, "-s", port)
	if !strings.Contains(out, "subnqn:  "+tg.NQN) {
		t.Fatalf("discover does not list %s:\n%s", tg.NQN, out)
	}
	out = e.must("connect", "-t", "rdma", "-a", host, "-s", port, "-n", tg.NQN, "--mount", mnt, "--mkfs")
	if !strings.Contains(out, "connecting to device: nvme0") {
		t.Fatalf("connect output:\n%s", out)
	}
	l := e.list()
	if len(l) != 1 || l[0].State != "live" || len(l[0].Namespaces) != 1 || l[0].Namespaces[0].Mount != mnt || l[0].Namespaces[0].Loop == "" {
		t.Fatalf("list: %+v", l)
	}
	loop := l[0].Namespaces[0].Loop
	if !hostfs.LoopDirectIO(loop) {
		t.Errorf("%s does not do direct I/O on the FUSE file", loop)
	}
	sums := writeTree(t, mnt, 300, 256<<10, 1)
	big := make([]byte, 40<<20)
	rand.Read(big)
	if err := writeFileSync(filepath.Join(mnt, "big"), big); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(big)
	sums["big"] = hex.EncodeToString(s[:])
	checkTree(t, mnt, sums)

	out = e.must("disconnect", "-n", tg.NQN)
	if !strings.Contains(out, "disconnected 1 controller(s)") {
		t.Fatalf("disconnect output: %s", out)
	}
	if m, _ := os.ReadFile("/proc/self/mounts"); strings.Contains(string(m), mnt) {
		t.Fatal("still mounted after disconnect")
	}
	if lo, _ := hostfs.RunTool("losetup", "-a"); strings.Contains(lo, e.state) {
		t.Fatalf("loop device still attached: %s", lo)
	}
	if len(e.list()) != 0 {
		t.Fatal("controller still listed after disconnect")
	}

	// The second time with the host daemon's metrics endpoint.
	msock := filepath.Join(e.dir, "metrics.sock")
	e.must("connect", "-a", host, "-s", port, "-n", tg.NQN, "--mount", mnt, "--metrics-listen", "unix:"+msock)
	checkTree(t, mnt, sums)
	mc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", msock)
	}}}
	resp, err := mc.Get("http://nvmeof/metrics")
	if err != nil {
		t.Fatalf("host metrics: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, w := range []string{`nvmeof_host_controller_state{state="live",subnqn="` + tg.NQN, "nvmeof_host_queue_latency_seconds_bucket", "nvmeof_host_queue_commands_total", "process_open_fds"} {
		if !strings.Contains(string(body), w) {
			t.Errorf("host metrics lack %q", w)
		}
	}
	if !regexp.MustCompile(`nvmeof_host_queue_commands_total\{op="read",qid="\d+",subnqn="[^"]+",traddr="[^"]+"\} [1-9]`).Match(body) {
		t.Errorf("host metrics count no reads after checkTree read the files back:\n%s", body)
	}
	e.must("disconnect", "-d", "nvme0")
	if _, err := os.Stat(msock); !os.IsNotExist(err) {
		t.Errorf("metrics socket left after disconnect: %v", err)
	}
}

// TestE2ETargetRestartMidIO writes and fsyncs files through the mounted
// filesystem while nvmetd is killed (SIGKILL) and started again: the
// initiator reconnects, the writer carries on, and every file whose fsync
// returned is intact — after a remount too.
func TestE2ETargetRestartMidIO(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	tg := startNvmetd(e, freePort(t), "256MiB")
	host, port := "127.0.0.1", strings.TrimPrefix(tg.addr, "127.0.0.1:")
	mnt := filepath.Join(e.dir, "mnt")
	e.must("connect", "-a", host, "-s", port, "-n", tg.NQN, "--mount", mnt, "--mkfs", "-c", "1", "-k", "2")

	var mu sync.Mutex
	acked := map[string]string{}
	var stop atomic.Bool
	var werr error
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(w), 7))
			for i := 0; !stop.Load(); i++ {
				rel := fmt.Sprintf("w%d/f%05d", w, i)
				data := make([]byte, rng.IntN(128<<10)+1)
				rand.Read(data)
				_ = os.MkdirAll(filepath.Join(mnt, filepath.Dir(rel)), 0o755)
				if err := writeFileSync(filepath.Join(mnt, rel), data); err != nil {
					mu.Lock()
					werr = fmt.Errorf("%s: %w", rel, err)
					mu.Unlock()
					return
				}
				s := sha256.Sum256(data)
				mu.Lock()
				acked[rel] = hex.EncodeToString(s[:])
				mu.Unlock()
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	time.Sleep(2 * time.Second)
	before := count()
	for round := 0; round < 2; round++ {
		tg.stop(syscall.SIGKILL) // mid-I/O: the writers have commands in flight
		time.Sleep(1500 * time.Millisecond)
		tg.start()
		deadline := time.Now().Add(60 * time.Second)
		for n := count(); count() < n+20; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the writers made no progress after the restart", round)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	if werr != nil {
		t.Fatalf("a write failed across the restarts: %v", werr)
	}
	l := e.list()
	if len(l) != 1 || l[0].Reconnects < 2 || l[0].State != "live" {
		t.Fatalf("list after restarts: %+v", l)
	}
	t.Logf("%d files before the first kill, %d acknowledged in all, %d reconnects", before, count(), l[0].Reconnects)
	checkTree(t, mnt, acked)
	e.must("disconnect", "-d", "nvme0")
	e.must("connect", "-a", host, "-s", port, "-n", tg.NQN, "--mount", mnt)
	checkTree(t, mnt, acked)
	e.must("disconnect", "-d", "nvme0")
}

// TestE2EErrors: refused connections give clear messages and a non-zero
// exit status, and leave no controller behind.
func TestE2EErrors(t *testing.T) {
	e := newEnv(t)
	tg := startNvmetd(e, freePort(t), "64MiB")
	port := strings.TrimPrefix(tg.addr, "127.0.0.1:")
	_, err := e.run("connect", "-a", "127.0.0.1", "-s", port, "-n", "nqn.2024-01.io.nvmetd.e2e:nope")
	if err == nil || !strings.Contains(err.Error(), "unknown subsystem") || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("unknown subsystem: %v", err)
	}
	_, err = e.run("connect", "-a", "127.0.0.1", "-s", strconv.Itoa(freePort(t)), "-n", tg.NQN)
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("nothing listening: %v", err)
	}
	_, err = e.run("connect", "-a", "127.0.0.1", "-n", "not-an-nqn")
	if err == nil || !strings.Contains(err.Error(), "exit status 2") {
		t.Fatalf("bad NQN: %v", err)
	}
	_, err = e.run("disconnect", "-d", "nvme7")
	if err == nil || !strings.Contains(err.Error(), "no such controller") {
		t.Fatalf("disconnect of nothing: %v", err)
	}
	if len(e.list()) != 0 {
		t.Fatal("a failed connect left a controller")
	}
}

// TestE2EConnectAll: connect-all connects to every NVM subsystem of the
// discovery log (skipping those already connected), disconnect-all undoes it.
func TestE2EConnectAll(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	tg := startNvmetd(e, freePort(t), "64MiB")
	port := strings.TrimPrefix(tg.addr, "127.0.0.1:")
	out := e.must("connect-all", "-t", "rdma", "-a", "127.0.0.1", "-s", port)
	if !strings.Contains(out, "connecting to device: nvme0") {
		t.Fatalf("connect-all:\n%s", out)
	}
	if l := e.list(); len(l) != 1 || l[0].SubNQN != tg.NQN || l[0].State != "live" {
		t.Fatalf("list: %+v", l)
	}
	out, err := e.run("connect-all", "-a", "127.0.0.1", "-s", port)
	if err != nil || len(e.list()) != 1 {
		t.Fatalf("second connect-all: %v\n%s", err, out)
	}
	e.must("disconnect-all")
	if len(e.list()) != 0 {
		t.Fatal("disconnect-all left a controller")
	}
	if out := e.must("gen-hostnqn"); !strings.HasPrefix(out, "nqn.2014-08.org.nvmexpress:uuid:") {
		t.Fatalf("gen-hostnqn: %q", out)
	}
}
