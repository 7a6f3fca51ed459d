package interop_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// testLabKernelRping runs the kernel's rping server and client (librdmacm
// user verbs over the siw kernel driver) inside the guest, over siw0 (the siw
// link on eth0) at the guest's address; the TCP connection runs over lo.
// (127.0.0.1 cannot be used: rdma_cm fails to resolve it for siw, with or
// without a siw link on lo; see test/lab/README.md.)
func testLabKernelRping(t *testing.T, k kernel) {
	vm := lab.Start(t, k.opts(labOpts))
	if links := vm.MustExec(t, "rdma link show"); !strings.Contains(links, "link siw0/1 state ACTIVE") {
		t.Fatalf("no active siw link siw0 in the guest; rdma link show:\n%s", links)
	}
	// rping itself (rdma-core's example, not our code) sometimes hangs in
	// the guest under TCG on a loaded host: a client that printed nothing
	// for its whole attempt (CI, 6.12, two busy loops). An attempt is
	// bounded; a hung one is logged with what it printed and retried on a
	// new port, up to three times. Five verified pings in any attempt pass.
	const count, size = 5, 1000
	var fails []string
	for attempt, port := range []int{7999, 7998, 7997} {
		out, err := rpingOnce(vm, port, count, size)
		if err == nil {
			t.Logf("rping over siw0 (%s:%d): %d x %d bytes verified (attempt %d)", vm.GuestAddr(), port, count, size, attempt+1)
			return
		}
		t.Logf("rping attempt %d on port %d: %v\n%s", attempt+1, port, err, out)
		fails = append(fails, err.Error())
	}
	t.Fatalf("rping over siw0 failed three times: %s", strings.Join(fails, "; "))
}

// rpingOnce runs one rping server and client pair on port, each bounded by
// one minute (five pings of 1000 bytes take milliseconds, seconds under
// TCG), and checks that the client printed count verified pings.
func rpingOnce(vm *lab.VM, port, count, size int) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := vm.GuestAddr()
	srv := vm.Background(ctx, fmt.Sprintf("rping -s -a %s -p %d -C %d -S %d -V", addr, port, count, size))
	defer srv.Kill()
	if err := srv.WaitListening(ctx, port); err != nil {
		return "", fmt.Errorf("rping -s not listening: %w", err)
	}
	out, err := vm.Exec(ctx, fmt.Sprintf("timeout 50 rping -c -a %s -p %d -v -C %d -S %d -V", addr, port, count, size))
	if err != nil {
		return out, fmt.Errorf("rping -c: %w", err)
	}
	pings := regexp.MustCompile(`(?m)^ping data: rdma-ping-\d+: `).FindAllString(out, -1)
	if len(pings) != count {
		return out, fmt.Errorf("rping -c printed %d ping lines, want %d", len(pings), count)
	}
	if sout, err := srv.Wait(); err != nil {
		return sout, fmt.Errorf("rping -s: %w", err)
	}
	return out, nil
}

// testLabGuestReachesHost has guest clients connect to a Go listener on the
// host's 127.0.0.1 through 10.0.2.2 and exchange data both ways: socat (a
// distribution binary) and netecho (a static Go binary, via BuildAndPut).
func testLabGuestReachesHost(t *testing.T, k kernel) {
	vm := lab.Start(t, k.opts(labOpts))

	t.Run("socat", func(t *testing.T) {
		ln := listen(t)
		payload := randBytes(t, 128<<10)
		got := make(chan []byte, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- nil
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Minute))
			up, _ := io.ReadAll(c) // until the guest half-closes
			fmt.Fprintf(c, "%x\n", sha256.Sum256(up))
			_, _ = c.Write(payload)
			got <- up
		}()
		f := fmt.Sprintf("/tmp/%s", strings.ReplaceAll(t.Name(), "/", "_"))
		out := vm.MustExec(t, fmt.Sprintf(
			`head -c 262144 /dev/urandom > %[1]s.up && socat -t 30 - TCP:%[2]s:%[3]d < %[1]s.up > %[1]s.down && `+
				`sha256sum < %[1]s.up | cut -d' ' -f1 && head -n1 %[1]s.down && tail -c +66 %[1]s.down | sha256sum | cut -d' ' -f1; `+
				`rm -f %[1]s.up %[1]s.down`,
			f, vm.HostAddr(), ln.Addr().(*net.TCPAddr).Port))
		up := <-got
		lines := strings.Fields(out)
		if len(lines) != 3 {
			t.Fatalf("guest output: %q", out)
		}
		upSum := fmt.Sprintf("%x", sha256.Sum256(up))
		if len(up) != 262144 || lines[0] != upSum || lines[1] != upSum {
			t.Errorf("guest -> host: host got %d bytes sha256 %s; guest sent sha256 %s and saw the host's %s",
				len(up), upSum, lines[0], lines[1])
		}
		if want := fmt.Sprintf("%x", sha256.Sum256(payload)); lines[2] != want {
			t.Errorf("host -> guest: guest got sha256 %s, host sent %s", lines[2], want)
		}
	})

	t.Run("go_binary", func(t *testing.T) {
		bin := vm.BuildAndPut(t, "./test/interop/internal/netecho")
		ln := listen(t)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Minute))
			_, _ = io.Copy(c, c)
		}()
		out := vm.MustExec(t, fmt.Sprintf("%s -dial %s:%d -bytes %d", bin, vm.HostAddr(), ln.Addr().(*net.TCPAddr).Port, 1<<20))
		if !strings.HasPrefix(out, fmt.Sprintf("ok %d bytes", 1<<20)) {
			t.Errorf("netecho -dial: %q", out)
		}
	})
}

// testLabHostReachesGuest connects from the host through a forwarded port to
// a server in the guest (netecho, a static Go binary) and checks the echo.
func testLabHostReachesGuest(t *testing.T, k kernel) {
	vm := lab.Start(t, k.opts(labOpts))
	bin := vm.BuildAndPut(t, "./test/interop/internal/netecho")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := vm.Background(ctx, bin+" -listen :7000 -n 1")
	defer srv.Kill()
	if err := srv.WaitListening(ctx, 7000); err != nil {
		t.Fatal(err)
	}
	hostPort := vm.ForwardedPort(7000)
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hostPort), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	data := randBytes(t, 1<<20)
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read the echo from 127.0.0.1:%d: %v", hostPort, err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write to 127.0.0.1:%d: %v", hostPort, err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("echo through 127.0.0.1:%d -> guest :7000 differs: sent %d bytes, got %d", hostPort, len(data), len(got))
	}
	sout, err := srv.Wait()
	if err != nil {
		t.Fatalf("guest netecho: %v", err)
	}
	if !strings.Contains(sout, fmt.Sprintf("echoed %d bytes", len(data))) {
		t.Errorf("guest netecho: %q", sout)
	}
	t.Logf("host 127.0.0.1:%d -> guest :7000: %d bytes echoed", hostPort, len(data))
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func randBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// testLabHarness checks the harness's own contract: exit codes and stderr in
// ExecError, the kill of a command whose context ends, and Put/Get.
func testLabHarness(t *testing.T, k kernel) {
	vm := lab.Start(t, k.opts(labOpts))

	t.Run("exit_code", func(t *testing.T) {
		out, err := vm.Exec(context.Background(), "echo out; echo err >&2; exit 7")
		var ee *lab.ExecError
		if !errors.As(err, &ee) || ee.ExitCode != 7 || ee.Stderr != "err\n" || out != "out\n" || ee.Err != nil {
			t.Fatalf("Exec = %q, %#v", out, err)
		}
		if !strings.Contains(err.Error(), "exit status 7") {
			t.Errorf("error text %q lacks the exit status", err)
		}
	})

	t.Run("timeout_kills", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		_, err := vm.Exec(ctx, "sleep 300 & sleep 301; echo not killed")
		var ee *lab.ExecError
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ee) || ee.ExitCode != -1 {
			t.Fatalf("Exec after its deadline: %v", err)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("Exec returned %v after its 2 s deadline", d)
		}
		if ps := vm.MustExec(t, "ps -o args | grep -c '^sleep 30[01]' || true"); strings.TrimSpace(ps) != "0" {
			t.Errorf("the command's processes survived the kill: %s", ps)
		}
	})

	// test/lab/vm.sh exec copies a job's output to its stdout while the
	// guest still appends to it. It used to die of SIGPIPE there (status
	// 141, under pipefail and set -e) whenever the output had grown between
	// its stat and its "tail | head": the rest of the output and the
	// command's exit status were lost.
	t.Run("vmsh_exec_growing_output", func(t *testing.T) {
		const outLines, errLines, width = 48, 16, 65536
		cmd := vm.VMSh("exec", fmt.Sprintf(`l=$(head -c %d /dev/zero | tr '\0' x); yes "$l" | head -n %d; yes "e$l" | head -n %d >&2; exit 3`, width-1, outLines, errLines))
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Errorf("vm.sh exec: %v, want exit status 3 (the command's); stdout %d bytes, stderr %d bytes", err, out.Len(), stderr.Len())
		}
		line := strings.Repeat("x", width-1) + "\n"
		for _, c := range []struct {
			name      string
			got, want string
		}{
			{"stdout", out.String(), strings.Repeat(line, outLines)},
			{"stderr", stderr.String(), strings.Repeat("e"+line, errLines)},
		} {
			if c.got != c.want {
				n := 0
				for n < min(len(c.got), len(c.want)) && c.got[n] == c.want[n] {
					n++
				}
				t.Errorf("vm.sh exec: %s is %d bytes, want %d; they differ from byte %d", c.name, len(c.got), len(c.want), n)
			}
		}
	})

	t.Run("put_get", func(t *testing.T) {
		dir := t.TempDir()
		data := randBytes(t, 3<<20)
		src := filepath.Join(dir, "blob")
		if err := os.WriteFile(src, data, 0o644); err != nil {
			t.Fatal(err)
		}
		gp, err := vm.Put(src)
		if err != nil {
			t.Fatal(err)
		}
		vm.MustExec(t, "cp "+lab.Quote(gp)+" /tmp/blob.copy")
		back := filepath.Join(dir, "back")
		if err := vm.Get("/tmp/blob.copy", back); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(back)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Put/Get round trip: %d bytes back (err %v), want %d", len(got), err, len(data))
		}
		vm.MustExec(t, "rm -f /tmp/blob.copy "+lab.Quote(gp))
	})
}
