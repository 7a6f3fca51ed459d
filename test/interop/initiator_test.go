package interop_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// The initiator interop test drives the Linux kernel target (nvmet-rdma over
// siw in the guest, set up through configfs by /lab/nvmet.sh) with nvmetd's
// initiator CLI from the host, through QEMU's port forward: nvmeof discover
// lists it (the same log as the guest's own nvme discover), nvmeof bench runs
// verified reads and writes (MPA CRC off, then required by our side), nvmeof
// connect mounts an ext4 on it through FUSE and a loop device, and the files
// survive a disconnect and a reconnect; a host the subsystem does not allow
// and an unknown subsystem are refused with clear messages.
//
// It runs late against each kernel (see suite), on the suite's VM: the Linux
// siw issue below can leave nvmet's queues unreleasable, which must not spill
// into other tests, and only the iw_cm reproducer, which needs no nvmet, runs
// after it before the VM is stopped. It checks the kernel log written since
// it started.
//
// Known Linux issue (siw, 6.1 and 6.12): with MPA CRC on, siw now and then reports
// "crc error ... op 2" on RDMA Read Responses that land in nvmet's buffers,
// although every FPDU on the wire carries the right CRC (checked on a
// host-side capture); nvmet then fails the RDMA READ, the queue errors, and
// nvmet may hang releasing it (nvmet_sq_destroy; seen on 6.12, see
// docs/linux-interop.md). The CRC run therefore uses
// loads without RDMA Reads by the target (in-capsule 4 KiB writes, large
// reads); NVMETD_INTEROP_SIW_CRC_READ=1 adds the large-write CRC run that
// shows the issue (the initiator reconnects and retries: the data verifies).

const (
	kernelNQN     = "nqn.2024-01.io.nvmetd-lab:kernel-target"
	restrictedNQN = "nqn.2024-01.io.nvmetd-lab:restricted"
	// Our host identity for the test, so that the allow list is exact.
	initHostNQN  = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000000aa"
	otherHostNQN = "nqn.2014-08.org.nvmexpress:uuid:6e766d65-7464-4c61-9b00-0000000000bb"
)

// guest runs a guest command, logs it and fails the test on error.
func guest(t *testing.T, vm *lab.VM, timeout time.Duration, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	out, err := vm.Exec(ctx, cmd)
	t.Logf("guest$ %s   (%s)\n%s", cmd, time.Since(start).Round(time.Millisecond), strings.TrimRight(out, "\n"))
	if err != nil {
		t.Fatalf("guest command failed: %v", err)
	}
	return out
}

// hostCLI runs our nvmeof on the host and logs it.
type hostCLI struct {
	t     *testing.T
	bin   string
	state string
}

func (h *hostCLI) run(args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Env = append(os.Environ(), "NVMEOF_STATE_DIR="+h.state)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	h.t.Logf("host$ nvmeof %s   (%s, %v)\n%s%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), err,
		out.String(), errb.String())
	return out.String(), errb.String(), err
}

func (h *hostCLI) must(args ...string) string {
	h.t.Helper()
	out, _, err := h.run(args...)
	if err != nil {
		h.t.Fatalf("nvmeof %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func buildNvmeof(t *testing.T) string {
	t.Helper()
	return hostBuild(t, "github.com/nvmetd/nvmetd/cmd/nvmeof", false)
}

// benchJSON is the part of nvmeof bench -o json the test checks.
type benchJSON struct {
	CRC          bool   `json:"mpa_crc"`
	Errors       uint64 `json:"errors"`
	Verified     uint64 `json:"verified_blocks"`
	VerifyErrors uint64 `json:"verify_errors"`
	Queues       int    `json:"io_queues"`
	Total        struct {
		IOs   uint64  `json:"ios"`
		IOPS  float64 `json:"iops"`
		MiBps float64 `json:"mib_per_s"`
	} `json:"total"`
}

func testInitiatorAgainstKernelTarget(t *testing.T, k kernel) {
	opts := k.opts(labOpts)
	opts.Forwards = []int{4420, 4421}
	vm := startHealthy(t, opts)
	mark := kmsgMark(t, vm)
	guest(t, vm, 2*time.Minute, "nvmet.sh teardown; nvmet.sh setup && nvmet.sh show")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := vm.WaitListening(ctx, 4420); err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(vm.ForwardedPort(4420))
	h := &hostCLI{t: t, bin: buildNvmeof(t), state: t.TempDir()}
	fab := []string{"-t", "rdma", "-a", "127.0.0.1", "-s", port, "-q", initHostNQN}

	t.Run("discover", func(t *testing.T) {
		h.t = t
		ours := h.must(append([]string{"discover"}, fab...)...)
		if !strings.Contains(ours, "subnqn:  "+kernelNQN) || !strings.Contains(ours, "traddr:  "+lab.GuestAddr) {
			t.Fatalf("our discover does not list the kernel target:\n%s", ours)
		}
		// The same log as the guest's own nvme-cli sees (the target reports
		// its address; only the generation counter may differ).
		theirs := guest(t, vm, time.Minute, "nvme discover -t rdma -a "+lab.GuestAddr+" -s 4420")
		strip := func(s string) string {
			var keep []string
			for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
				if !strings.HasPrefix(l, "Discovery Log Number of Records") {
					keep = append(keep, strings.TrimRight(l, " "))
				}
			}
			return strings.Join(keep, "\n")
		}
		if strip(ours) != strip(theirs) {
			t.Errorf("nvmeof discover and nvme discover differ:\nours:\n%s\ntheirs:\n%s", ours, theirs)
		}
		js := h.must(append([]string{"discover", "-o", "json"}, fab...)...)
		var d struct {
			Records []struct{ Subnqn, Traddr, Trsvcid string } `json:"records"`
		}
		if err := json.Unmarshal([]byte(js), &d); err != nil || len(d.Records) == 0 {
			t.Fatalf("json: %v\n%s", err, js)
		}
	})

	bench := func(t *testing.T, crc string, load []string) benchJSON {
		args := append([]string{"bench"}, fab...)
		args = append(args, "-n", kernelNQN, "-i", "2", "--crc", crc, "--runtime", "5s", "--size", "64m", "--verify", "-o", "json")
		out := h.must(append(args, load...)...)
		var r benchJSON
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if r.Errors != 0 || r.VerifyErrors != 0 || r.Verified == 0 || r.Total.IOs == 0 {
			t.Fatalf("bench %v: %+v", load, r)
		}
		if r.CRC != (crc == "required") {
			t.Fatalf("MPA CRC in use: %v, asked %s", r.CRC, crc)
		}
		t.Logf("%v crc %s: %.0f IOPS, %.1f MiB/s, %d blocks verified", load, crc, r.Total.IOPS, r.Total.MiBps, r.Verified)
		return r
	}
	t.Run("bench-verify-crc-off", func(t *testing.T) {
		h.t = t
		bench(t, "off", []string{"--rw", "randrw", "--bs", "4k", "--iodepth", "16"})
		bench(t, "off", []string{"--rw", "randrw", "--bs", "256k", "--iodepth", "8"})
	})
	t.Run("bench-verify-crc-required", func(t *testing.T) {
		h.t = t
		// The verification pattern goes on with CRC off; then, with CRC
		// required, writes of 4 KiB travel in-capsule and reads come by
		// siw's RDMA Writes (CRC made by siw, checked by us): no RDMA Read
		// by the target (see the package comment).
		h.must(append(append([]string{"bench"}, fab...), "-n", kernelNQN, "--prefill-only", "--seed", "77",
			"--bs", "1m", "--iodepth", "4", "--size", "64m")...)
		bench(t, "required", []string{"--rw", "randrw", "--bs", "4k", "--iodepth", "16", "--seed", "77", "--prefilled"})
		bench(t, "required", []string{"--rw", "randread", "--bs", "256k", "--iodepth", "8", "--seed", "77", "--prefilled"})
	})
	if os.Getenv("NVMETD_INTEROP_SIW_CRC_READ") != "" {
		t.Run("bench-verify-crc-required-rdma-read", func(t *testing.T) {
			h.t = t
			r := bench(t, "required", []string{"--rw", "randwrite", "--bs", "256k", "--iodepth", "8", "-c", "1"})
			t.Logf("siw: %d CRC errors reported by the guest; the writes still verified: %+v",
				strings.Count(vm.Dmesg(), "siw: crc error"), r)
		})
	}

	t.Run("connect-mount-reconnect", func(t *testing.T) {
		h.t = t
		if os.Geteuid() != 0 {
			t.Skip("needs root: mounts FUSE with mount(2), attaches a loop device and mounts ext4")
		}
		mnt := filepath.Join(t.TempDir(), "mnt")
		defer func() {
			if t.Failed() {
				_, _, _ = h.run("disconnect-all", "--force")
			}
		}()
		h.must(append([]string{"connect", "-n", kernelNQN, "-i", "2", "--mount", mnt, "--mkfs"}, fab...)...)
		sums := map[string][32]byte{}
		for i := 0; i < 40; i++ {
			data := make([]byte, 1+i*7919)
			rand.Read(data)
			p := filepath.Join(mnt, fmt.Sprintf("f%02d", i))
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			sums[p] = sha256.Sum256(data)
		}
		big := make([]byte, 16<<20)
		rand.Read(big)
		if err := os.WriteFile(filepath.Join(mnt, "big"), big, 0o644); err != nil {
			t.Fatal(err)
		}
		sums[filepath.Join(mnt, "big")] = sha256.Sum256(big)
		out := h.must("list")
		if !strings.Contains(out, kernelNQN) || !strings.Contains(out, mnt) {
			t.Fatalf("list:\n%s", out)
		}
		h.must("disconnect", "-n", kernelNQN)
		h.must(append([]string{"connect", "-n", kernelNQN, "--mount", mnt}, fab...)...)
		for p, want := range sums {
			b, err := os.ReadFile(p)
			if err != nil || sha256.Sum256(b) != want {
				t.Fatalf("%s differs after reconnect (%v)", p, err)
			}
		}
		h.must("disconnect", "-n", kernelNQN)
	})

	t.Run("refused", func(t *testing.T) {
		h.t = t
		guest(t, vm, time.Minute, "HOSTNQN="+otherHostNQN+" NQN="+restrictedNQN+" BACKEND=nullb-mem SIZE_MB=64 PORTID=2 TRSVCID=4421 nvmet.sh setup")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := vm.WaitListening(ctx, 4421); err != nil {
			t.Fatal(err)
		}
		p2 := strconv.Itoa(vm.ForwardedPort(4421))
		_, stderr, err := h.run("bench", "-a", "127.0.0.1", "-s", p2, "-q", initHostNQN, "-n", restrictedNQN, "--runtime", "1s")
		if err == nil || !strings.Contains(stderr, "host not allowed") {
			t.Fatalf("a host not in the allow list: %v %s", err, stderr)
		}
		out := h.must("bench", "-a", "127.0.0.1", "-s", p2, "-q", otherHostNQN, "-n", restrictedNQN, "--runtime", "1s", "--verify", "--size", "4m")
		if !strings.Contains(out, "0 bad") {
			t.Fatalf("the allowed host's bench:\n%s", out)
		}
		_, stderr, err = h.run("bench", "-a", "127.0.0.1", "-s", port, "-q", initHostNQN, "-n", "nqn.2024-01.io.nvmetd-lab:nope", "--runtime", "1s")
		if err == nil || !strings.Contains(stderr, "unknown subsystem") {
			t.Fatalf("an unknown subsystem: %v %s", err, stderr)
		}
	})

	if os.Getenv("NVMETD_INTEROP_SIW_CRC_READ") != "" {
		return // the guest may be wedged (see the package comment)
	}
	for _, l := range strings.Split(dmesgSince(t, vm, mark), "\n") {
		if (strings.Contains(l, "nvmet_rdma: ") || strings.Contains(l, "siw: ")) && strings.Contains(l, "rror") ||
			strings.Contains(l, "BUG") || strings.Contains(l, "WARNING") || strings.Contains(l, "blocked for more") {
			t.Errorf("guest kernel log: %s", l)
		}
	}
	guest(t, vm, time.Minute, "nvmet.sh teardown")
}
