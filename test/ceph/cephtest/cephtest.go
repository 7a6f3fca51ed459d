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
	// Short: the admin sockets' paths must fit in 107 bytes.
	dir, err := os.MkdirTemp("", "nvmetd-ceph-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := script(dir, "stop"); err != nil {
			t.Errorf("cluster.sh stop: %v\n%s", err, out)
		}
		os.RemoveAll(dir)
	})
	begin := time.Now()
	c, err := start(dir)
	if err != nil {
		fatal(t, err)
	}
	t.Logf("private ceph cluster %s started in %s", dir, time.Since(begin).Round(time.Millisecond))
	return c
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
func script(dir string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{Script()}, args...)...)
	cmd.Env = os.Environ()
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

func start(dir string) (*Cluster, error) {
	if _, err := script(dir, "start"); err != nil {
		return nil, err
	}
	out, err := script(dir, "env")
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	c := &Cluster{
		Dir: env["CEPH_DIR"], Conf: env["CEPH_CONF"], Keyring: env["CEPH_KEYRING"], ClientID: env["CEPH_CLIENT_ID"],
		Pool: env["CEPH_POOL"], AdminKeyring: env["CEPH_ADMIN_KEYRING"], FSID: env["CEPH_FSID"], MonHost: env["CEPH_MON_HOST"],
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
	if out, err := script(c.Dir, "stop"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// Daemons names the cluster's daemons, for Signal.
var Daemons = []string{"mon.a", "osd.0"}

// Signal sends sig to a daemon of the cluster ("mon.a" or "osd.0"), e.g.
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
