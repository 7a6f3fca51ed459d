//go:build rbd

package cephtest

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestClusterScript: cluster.sh start is idempotent, status tells a
// running cluster from a stopped one, the pool is replicated across its
// OSDs (size 3, min_size 2 with three), the client can use the pool with
// cephx, and stop leaves no daemon and no state behind (twice in a row).
// It runs under the rbd tag, with the rbd backend's tests (make test-rbd).
func TestClusterScript(t *testing.T) {
	c := Private(t)
	pids := map[string]int{}
	if len(c.Daemons) < 2 || c.Daemons[0] != "mon.a" || c.Daemons[1] != "osd.0" {
		t.Fatalf("daemons %q: want mon.a, osd.0, …", c.Daemons)
	}
	for _, name := range c.Daemons {
		b, err := os.ReadFile(c.Dir + "/run/" + name + ".pid")
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s pid file: %q", name, b)
		}
		pids[name] = pid
	}
	// Again: the running cluster is kept (same daemons).
	if out, err := script(c.Dir, nil, "start"); err != nil {
		t.Fatalf("second start: %v\n%s", err, out)
	}
	for name, pid := range pids {
		b, _ := os.ReadFile(c.Dir + "/run/" + name + ".pid")
		if strings.TrimSpace(string(b)) != strconv.Itoa(pid) {
			t.Errorf("second start replaced %s (pid %d, now %q)", name, pid, b)
		}
	}
	if out, err := script(c.Dir, nil, "status"); err != nil {
		t.Errorf("status of a running cluster: %v\n%s", err, out)
	}

	// The pool's replication follows the number of OSDs.
	wantSize, wantMin := map[int]string{1: "1", 2: "2"}[c.OSDs()], "1"
	if c.OSDs() >= 3 {
		wantSize, wantMin = "3", "2"
	}
	for key, want := range map[string]string{"size": wantSize, "min_size": wantMin} {
		out, err := exec.Command("ceph", "--conf", c.Conf, "--name", "client.admin", "--keyring", c.AdminKeyring,
			"osd", "pool", "get", c.Pool, key).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != key+": "+want {
			t.Errorf("pool %s with %d OSDs: %q (%v), want %s", key, c.OSDs(), out, err, want)
		}
	}

	// cephx: the client's key works, a wrong one does not.
	image := c.CreateImage(t, 4<<20)
	if out, err := c.RBD("info", "--pool", c.Pool, image); err != nil || !strings.Contains(out, "size 4 MiB") {
		t.Errorf("rbd info: %v\n%s", err, out)
	}
	bad := *c
	bad.Keyring = c.AdminKeyring // the key of client.admin, not client.nvmetd
	if _, err := bad.RBD("info", "--pool", c.Pool, image); err == nil {
		t.Errorf("rbd with another user's key succeeded: cephx is off?")
	}

	// Remove the image while the cluster runs (its cleanup would find the
	// cluster stopped).
	if _, err := c.RBD("remove", "--no-progress", "--pool", c.Pool, image); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		c.Stop(t)
		for name, pid := range pids {
			if err := exec.Command("kill", "-0", strconv.Itoa(pid)).Run(); err == nil {
				t.Errorf("stop %d: %s (pid %d) still runs", i+1, name, pid)
			}
		}
		if _, err := script(c.Dir, nil, "status"); err == nil {
			t.Errorf("stop %d: status says running", i+1)
		}
		entries, _ := os.ReadDir(c.Dir)
		for _, e := range entries {
			if e.Name() != ".lock" {
				t.Errorf("stop %d left %s in %s", i+1, e.Name(), c.Dir)
			}
		}
	}
}
