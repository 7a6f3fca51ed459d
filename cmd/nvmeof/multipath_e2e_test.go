package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/nvmetd/nvmetd/initiator/fusedev"

	"github.com/nvmetd/nvmetd/initiator/hoststate"
)

// Native multipath through the CLI (issue 13): a second port of a
// connected subsystem is a path of the same device, list shows the paths
// and their ANA states, and I/O goes on through the other path while one
// goes inaccessible or its nvmetd dies.

// mpTargetConfig is an nvmetd configuration serving testNQN on ports
// (IDs 1, 2, ...), group 1 in states[i] through port i, controller IDs
// cmin..cmax, namespace 1 on img (no lock: several processes share it).
func mpTargetConfig(sock string, ports []int, states []string, cmin, cmax uint16, img string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "daemon:\n  log_format: console\n  control_socket: %s\nports:\n", sock)
	for i, p := range ports {
		fmt.Fprintf(&b, "  - {id: %d, address: 127.0.0.1, service_id: %d, subsystems: [%s], ana_groups: [{id: 1, state: %s}]}\n", i+1, p, testNQN, states[i])
	}
	fmt.Fprintf(&b, "subsystems:\n  - nqn: %s\n    allow_any_host: true\n    cntlid_min: %d\n    cntlid_max: %d\n    namespaces:\n", testNQN, cmin, cmax)
	fmt.Fprintf(&b, "      - {nsid: 1, backend: {kind: file, path: %s, size: 128MiB, no_lock: true}}\n", img)
	return b.String()
}

// mpNvmetd starts an nvmetd process with configuration cfg (written to
// name.yaml in the test's directory) listening on port.
func mpNvmetd(e *env, name string, port int, cfg string) *nvmetdProc {
	_, bin := bins(e.t)
	p := &nvmetdProc{t: e.t, bin: bin, cfg: filepath.Join(e.dir, name+".yaml"), logf: filepath.Join(e.dir, name+".log"),
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), NQN: testNQN}
	if err := os.WriteFile(p.cfg, []byte(cfg), 0o644); err != nil {
		e.t.Fatal(err)
	}
	p.start()
	e.targets = append(e.targets, p)
	return p
}

// reload rewrites p's configuration and sends SIGHUP.
func (p *nvmetdProc) reload(cfg string) {
	p.t.Helper()
	if err := os.WriteFile(p.cfg, []byte(cfg), 0o644); err != nil {
		p.t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		p.t.Fatal(err)
	}
}

// waitPaths waits until list shows device 0 with the path states and
// namespace 1's ANA states want ("live optimized", ... one per path, in
// order).
func (e *env) waitPaths(want ...string) hoststate.Controller {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var got []string
	for {
		l := e.list()
		got = got[:0]
		if len(l) == 1 {
			for _, p := range l[0].Paths {
				s := p.State
				for _, a := range p.ANA {
					if a.NSID == 1 {
						s += " " + a.State
					}
				}
				got = append(got, s)
			}
			if strings.Join(got, ",") == strings.Join(want, ",") {
				return l[0]
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("paths %q, want %q (list: %+v)", got, want, l)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestE2EMultipathSecondPort: two ports serving one subsystem gave two
// controllers with the same NGUID, both mountable read-write (then, until
// multipath, a refused second attach). Now connect to the second port adds
// a path to the device: one FUSE file, one loop device, one mount; list
// shows both paths and their ANA states; the filesystem works on while one
// port's group is inaccessible; --mount with the second port is refused.
func TestE2EMultipathSecondPort(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	p1, p2 := freePort(t), freePort(t)
	img := filepath.Join(e.dir, "ns1.img")
	sock := filepath.Join(e.dir, "nvmetd.sock")
	tg := mpNvmetd(e, "nvmetd", p1, mpTargetConfig(sock, []int{p1, p2}, []string{"optimized", "optimized"}, 1, 0xFFEF, img))
	mnt := filepath.Join(e.dir, "mnt")
	e.must("connect", "-a", "127.0.0.1", "-s", strconv.Itoa(p1), "-n", testNQN, "--mount", mnt, "--mkfs")
	sums := writeTree(t, mnt, 20, 64<<10, 3)

	out, err := e.run("connect", "-a", "127.0.0.1", "-s", strconv.Itoa(p2), "-n", testNQN, "--mount", filepath.Join(e.dir, "mnt2"))
	if err == nil || !strings.Contains(err.Error(), "adds a path") {
		t.Fatalf("second port with --mount: %v\n%s", err, out)
	}
	out = e.must("connect", "-a", "127.0.0.1", "-s", strconv.Itoa(p2), "-n", testNQN, "--iopolicy", "round-robin")
	if !strings.Contains(out, fmt.Sprintf("added path 127.0.0.1:%d to nvme0", p2)) {
		t.Fatalf("second port: %s", out)
	}
	st := e.waitPaths("live optimized", "live optimized")
	if st.IOPolicy != "round-robin" || len(st.Namespaces) != 1 || st.Paths[0].CNTLID == st.Paths[1].CNTLID {
		t.Fatalf("list: %+v", st)
	}
	if out, err := e.run("connect", "-a", "127.0.0.1", "-s", strconv.Itoa(p2), "-n", testNQN); err == nil || !strings.Contains(err.Error(), "already connected") {
		t.Fatalf("third connect to the same port: %v\n%s", err, out)
	}
	text := e.must("list")
	for _, want := range []string{"round-robin", fmt.Sprintf("rdma 127.0.0.1:%d", p1), fmt.Sprintf("rdma 127.0.0.1:%d", p2), "n1 optimized"} {
		if !strings.Contains(text, want) {
			t.Fatalf("list does not show %q:\n%s", want, text)
		}
	}
	t.Logf("list:\n%s", text)

	// Port 1's group goes inaccessible: the filesystem goes on through
	// port 2.
	tg.reload(mpTargetConfig(sock, []int{p1, p2}, []string{"inaccessible", "optimized"}, 1, 0xFFEF, img))
	e.waitPaths("live inaccessible", "live optimized")
	more := writeTree(t, filepath.Join(mnt, "more"), 20, 64<<10, 4)
	checkTree(t, mnt, sums)
	checkTree(t, filepath.Join(mnt, "more"), more)
	tg.reload(mpTargetConfig(sock, []int{p1, p2}, []string{"optimized", "optimized"}, 1, 0xFFEF, img))
	e.waitPaths("live optimized", "live optimized")
	e.must("disconnect", "-d", "nvme0")
	if l := e.list(); len(l) != 0 {
		t.Fatalf("after disconnect: %+v", l)
	}
}

// TestE2EMultipathBenchFailover: two nvmetd processes serve one subsystem
// on one file (distinct CNTLID ranges); nvmeof bench --verify runs on the
// device through both paths while one process is SIGKILLed, restarted,
// and the other's group set inaccessible by reload and back: no I/O error,
// no verification error.
func TestE2EMultipathBenchFailover(t *testing.T) {
	e := newEnv(t)
	e.logOnFailure()
	img := filepath.Join(e.dir, "ns1.img")
	ports := []int{freePort(t), freePort(t)}
	cfg := func(i int, state string) string {
		return mpTargetConfig(filepath.Join(e.dir, fmt.Sprintf("nvmetd%d.sock", i)), ports[i:i+1], []string{state}, uint16(1+1000*i), uint16(999+1000*i), img)
	}
	a := mpNvmetd(e, "nvmetd0", ports[0], cfg(0, "optimized"))
	b := mpNvmetd(e, "nvmetd1", ports[1], cfg(1, "optimized"))
	e.must("connect", "-a", "127.0.0.1", "-s", strconv.Itoa(ports[0]), "-n", testNQN, "-c", "1")
	e.must("connect", "-a", "127.0.0.1", "-s", strconv.Itoa(ports[1]), "-n", testNQN, "-c", "1")
	e.waitPaths("live optimized", "live optimized")

	// The bench, its progress lines read as they come.
	cmd := exec.Command(e.bin, "bench", "-d", "nvme0", "--rw", "randrw", "--bs", "4096", "--iodepth", "16", "--size", "16m", "--verify", "--runtime", "40s")
	cmd.Env = append(os.Environ(), "NVMEOF_STATE_DIR="+e.state)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	var all strings.Builder
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	waitLine := func(what string) {
		t.Helper()
		deadline := time.After(2 * time.Minute)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("bench ended before %s", what)
				}
				if strings.Contains(l, "IOPS") && strings.HasPrefix(strings.TrimSpace(l), "[") {
					return
				}
			case <-deadline:
				t.Fatalf("no bench progress before %s", what)
			}
		}
	}
	waitLine("the SIGKILL")
	a.stop(syscall.SIGKILL)
	e.waitPaths("connecting optimized", "live optimized")
	waitLine("the restart")
	a.start()
	e.waitPaths("live optimized", "live optimized")
	b.reload(cfg(1, "inaccessible"))
	e.waitPaths("live optimized", "live inaccessible")
	waitLine("the group comes back")
	b.reload(cfg(1, "optimized"))
	e.waitPaths("live optimized", "live optimized")
	err = cmd.Wait()
	for range lines {
	}
	t.Logf("bench:\n%s", all.String())
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(all.String(), " 0 bad") {
		t.Fatalf("bench did not verify without errors:\n%s", all.String())
	}
	e.must("disconnect", "-d", "nvme0")
}

// TestFUSEDescriptorCloseOnExec: the daemon's /dev/fuse descriptors are
// close-on-exec, so the tools it runs (umount, losetup, mkfs) do not keep
// its FUSE connection alive (go-fuse opens /dev/fuse without O_CLOEXEC; a
// stuck umount -l holding it left requests that nothing answered or
// aborted).
func TestFUSEDescriptorCloseOnExec(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	srv, _, err := fusedev.Mount(dir, "cloexec-test", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fusedev.Unmount(srv, dir, zap.NewNop())
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != "/dev/fuse" {
			continue
		}
		fd, _ := strconv.Atoi(e.Name())
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil {
			t.Fatal(err)
		}
		if flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("/dev/fuse descriptor %d is inherited by the daemon's child processes", fd)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no /dev/fuse descriptor found after the mount")
	}
}
