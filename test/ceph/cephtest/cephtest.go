// Package cephtest gives tests a real Ceph cluster: the single-node cluster
// of test/ceph/cluster.sh (one monitor, one memstore OSD, cephx, on
// 127.0.0.1), started on demand.
//
// [Shared] is the cluster every test of a `go test` run shares (and other
// runs on the machine with the same NVMETD_CEPH_DIR): started if it is not
// running, left running afterwards (`make test` stops it; so does
// `test/ceph/cluster.sh stop`). Tests on it use images of their own
// ([Cluster.CreateImage]). [Private] is a cluster of the test's own, for
// tests that stop it. The package needs no cgo; it drives the cluster with
// the script and the rbd tool.
package cephtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Cluster is a running test cluster and the client nvmetd uses on it.
type Cluster struct {
	Dir          string // state directory of the script
	Conf         string // ceph.conf: monitor address, cephx
	Keyring      string // keyring of ClientID
	ClientID     string // cephx user ("nvmetd": client.nvmetd, caps profile rbd)
	Pool         string // RBD pool
	AdminKeyring string // keyring of client.admin
	FSID         string // the cluster's fsid
	MonHost      string // the monitor's address, as in ceph.conf
	Addr         string // the address every daemon binds to (127.0.0.1 unless NVMETD_CEPH_ADDR)
	// Daemons names the cluster's daemons ("mon.a", "osd.0", …), for
	// Signal.
	Daemons []string
}

// OSDs returns the number of the cluster's OSDs.
func (c *Cluster) OSDs() int {
	n := 0
	for _, d := range c.Daemons {
		if strings.HasPrefix(d, "osd.") {
			n++
		}
	}
	return n
}

// commandTimeout bounds every command the package runs (the script's start
// bounds its own waits at 90 s; a cold start installs packages first).
const commandTimeout = 15 * time.Minute

// Script returns the path of test/ceph/cluster.sh.
func Script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "cluster.sh")
}

var shared struct {
	once sync.Once
	c    *Cluster
	err  error
	took time.Duration
}

// Shared returns the shared cluster, starting it if it is not running. A
// failure to start fails the test, except where the Ceph packages are
// missing and cannot be installed (not root), which skips it saying so.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		begin := time.Now()
		shared.c, shared.err = start(os.Getenv("NVMETD_CEPH_DIR"))
		shared.took = time.Since(begin)
		if shared.err == nil {
			t.Logf("ceph cluster %s (start, or check that it runs, took %s)", shared.c.Dir, shared.took.Round(time.Millisecond))
		}
	})
	if shared.err != nil {
		fatal(t, shared.err)
	}
	return shared.c
}

// Private starts a cluster of the test's own, in a new directory; it is
// stopped and removed when the test ends.
func Private(t testing.TB) *Cluster {
	t.Helper()
	c, stop, err := StartPrivate(nil)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		fatal(t, err)
	}
	return c
}

// StartPrivate starts a cluster in a new directory with env added to the
// script's environment (NVMETD_CEPH_OSDS, NVMETD_CEPH_ADDR, …) and returns
// it with the function that stops it and removes its directory (to call
// even when the start failed). For a cluster that outlives one test (a
// package's TestMain); a test uses Private.
func StartPrivate(env []string) (*Cluster, func() error, error) {
	// Short: the admin sockets' paths must fit in 107 bytes.
	dir, err := os.MkdirTemp("", "nvmetd-ceph-")
	if err != nil {
		return nil, func() error { return nil }, err
	}
	stop := func() error {
		defer os.RemoveAll(dir)
		if out, err := script(dir, env, "stop"); err != nil {
			return fmt.Errorf("cluster.sh stop: %w\n%s", err, out)
		}
		return nil
	}
	c, err := startEnv(dir, env)
	return c, stop, err
}

func fatal(t testing.TB, err error) {
	t.Helper()
	if os.Getuid() != 0 && strings.Contains(err.Error(), "missing packages") {
		t.Skipf("no Ceph cluster: %v", err)
	}
	t.Fatalf("ceph cluster: %v", err)
}

// script runs cluster.sh with dir as its state directory ("" for the
// script's default).
func script(dir string, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{Script()}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	if dir != "" {
		cmd.Env = append(cmd.Env, "NVMETD_CEPH_DIR="+dir)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return append(out, stderr.Bytes()...), fmt.Errorf("cluster.sh %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func start(dir string) (*Cluster, error) { return startEnv(dir, nil) }

func startEnv(dir string, env []string) (*Cluster, error) {
	if _, err := script(dir, env, "start"); err != nil {
		return nil, err
	}
	out, err := script(dir, env, "env")
	if err != nil {
		return nil, err
	}
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			vars[k] = v
		}
	}
	c := &Cluster{
		Dir: vars["CEPH_DIR"], Conf: vars["CEPH_CONF"], Keyring: vars["CEPH_KEYRING"], ClientID: vars["CEPH_CLIENT_ID"],
		Pool: vars["CEPH_POOL"], AdminKeyring: vars["CEPH_ADMIN_KEYRING"], FSID: vars["CEPH_FSID"], MonHost: vars["CEPH_MON_HOST"],
		Addr: vars["CEPH_ADDR"], Daemons: strings.Fields(vars["CEPH_DAEMONS"]),
	}
	if len(c.Daemons) == 0 {
		c.Daemons = []string{"mon.a", "osd.0"} // a script without CEPH_DAEMONS
	}
	if c.Conf == "" || c.Keyring == "" || c.ClientID == "" || c.Pool == "" {
		return nil, fmt.Errorf("cluster.sh env: incomplete output:\n%s", out)
	}
	return c, nil
}

// Stop stops the cluster's daemons (for a Private cluster: the test of
// what clients do when the cluster goes away).
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if out, err := script(c.Dir, nil, "stop"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// Signal sends sig to a daemon of the cluster (one of c.Daemons), e.g.
// SIGSTOP and SIGCONT to make the cluster unreachable for a while without
// losing its state.
func (c *Cluster) Signal(t testing.TB, daemon string, sig syscall.Signal) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.Dir, "run", daemon+".pid"))
	if err != nil {
		t.Fatalf("%s: %v", daemon, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s pid file: %q", daemon, b)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("signal %v to %s (pid %d): %v", sig, daemon, pid, err)
	}
}

// RBD runs the rbd tool as the cluster's client (client.nvmetd) with args
// and returns its standard output.
func (c *Cluster) RBD(args ...string) (string, error) {
	return c.tool("rbd", args...)
}

// Ceph runs the ceph tool as the cluster's client (client.nvmetd, whose
// caps are a gateway's: "profile rbd", which may blocklist) with args and
// returns its standard output.
func (c *Cluster) Ceph(args ...string) (string, error) {
	return c.tool("ceph", args...)
}

func (c *Cluster) tool(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	base := []string{"--conf", c.Conf, "--id", c.ClientID, "--keyring", c.Keyring}
	if name == "rbd" {
		base = append(base, "--rados-osd-op-timeout", "30", "--rados-mon-op-timeout", "30", "--client-mount-timeout", "30")
	} else {
		base = append(base, "--connect-timeout", "30")
	}
	cmd := exec.CommandContext(ctx, name, append(base, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// CreateImage creates an image of size bytes with a name unique to the
// test in the cluster's pool, removed when the test ends, and returns its
// name.
func (c *Cluster) CreateImage(t testing.TB, size int64) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := "test-" + hex.EncodeToString(b[:])
	if _, err := c.RBD("create", "--pool", c.Pool, "--size", strconv.FormatInt(size, 10)+"B", name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A Private cluster may be gone by now; the image goes with it.
		if _, err := os.Stat(c.Conf); err != nil {
			return
		}
		if _, err := c.RBD("remove", "--no-progress", "--pool", c.Pool, name); err != nil {
			t.Errorf("remove image %s: %v", name, err)
		}
	})
	return name
}

// Resize sets the size of image to size bytes (shrinking allowed).
func (c *Cluster) Resize(t testing.TB, image string, size int64) {
	t.Helper()
	if _, err := c.RBD("resize", "--no-progress", "--allow-shrink", "--pool", c.Pool,
		"--size", strconv.FormatInt(size, 10)+"B", image); err != nil {
		t.Fatal(err)
	}
}
