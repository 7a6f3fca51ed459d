package interop_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// testInitiatorTCPKernelTarget: nvmeof -t tcp against the guest kernel's
// nvmet-tcp (stock module, no siw), set up through configfs by nvmet.sh:
// discover (the same log as the guest's nvme-cli), bench --verify with
// header and data digests off and on, connect + mkfs + mount, reconnect and
// read back; on 6.12 DH-HMAC-CHAP (the host authenticates to the kernel
// target, unidirectional and bidirectional; a wrong key refused).
func testInitiatorTCPKernelTarget(t *testing.T, k kernel) {
	opts := k.opts(labOpts)
	opts.Forwards = []int{4420, 4421}
	vm := startHealthy(t, opts)
	mark := kmsgMark(t, vm)
	guest(t, vm, 2*time.Minute, "nvmet.sh teardown; TRTYPE=tcp SIZE_MB=256 nvmet.sh setup && nvmet.sh show")
	defer vm.Exec(context.Background(), "nvmet.sh teardown >/dev/null 2>&1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := vm.WaitListening(ctx, 4420); err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(vm.ForwardedPort(4420))
	h := &hostCLI{t: t, bin: buildNvmeof(t), state: t.TempDir()}
	fab := []string{"-t", "tcp", "-a", "127.0.0.1", "-s", port, "-q", initHostNQN}

	t.Run("discover", func(t *testing.T) {
		h.t = t
		ours := h.must(append([]string{"discover"}, fab...)...)
		if !strings.Contains(ours, "subnqn:  "+kernelNQN) || !strings.Contains(ours, "trtype:  tcp") {
			t.Fatalf("our discover does not list the kernel's TCP port:\n%s", ours)
		}
		theirs := guest(t, vm, time.Minute, "nvme discover -t tcp -a "+lab.GuestAddr+" -s 4420")
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
			t.Errorf("nvmeof discover -t tcp and nvme discover -t tcp differ:\nours:\n%s\ntheirs:\n%s", ours, theirs)
		}
	})

	bench := func(t *testing.T, extra ...string) {
		h.t = t
		args := append(append([]string{"bench"}, fab...), "-n", kernelNQN, "-i", "2", "--runtime", "3s", "--size", "64m", "--verify", "-o", "json")
		out := h.must(append(args, extra...)...)
		var r benchJSON
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if r.Errors != 0 || r.VerifyErrors != 0 || r.Verified == 0 || r.Total.IOs == 0 {
			t.Fatalf("bench %v: %+v", extra, r)
		}
		t.Logf("%v: %.0f IOPS, %.1f MiB/s, %d blocks verified", extra, r.Total.IOPS, r.Total.MiBps, r.Verified)
	}
	for _, dg := range [][]string{nil, {"-g", "-G"}} {
		t.Run(fmt.Sprintf("bench-verify-digests-%v", dg != nil), func(t *testing.T) {
			// 4 KiB writes in the capsule, 256 KiB writes by R2T/H2CData
			// (nvmet-tcp's MAXH2CDATA splits them), reads by C2HData.
			bench(t, append([]string{"--rw", "randrw", "--bs", "4k", "--iodepth", "16"}, dg...)...)
			bench(t, append([]string{"--rw", "randrw", "--bs", "256k", "--iodepth", "8"}, dg...)...)
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
		h.must(append([]string{"connect", "-n", kernelNQN, "-i", "2", "-g", "-G", "--mount", mnt, "--mkfs"}, fab...)...)
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

	t.Run("dhchap", func(t *testing.T) {
		h.t = t
		if k == "6.1" {
			t.Skip("Linux 6.1 (Debian 6.1.0-56) is built without CONFIG_NVME_TARGET_AUTH: nvmet has no DH-HMAC-CHAP; runs against 6.12")
		}
		hostKey := strings.TrimSpace(h.must("gen-dhchap-key", "-m", "2", "-n", initHostNQN))
		ctrlKey := strings.TrimSpace(guest(t, vm, time.Minute, "nvme gen-dhchap-key -m 3 -n "+kernelNQN))
		wrongKey := strings.TrimSpace(h.must("gen-dhchap-key", "-m", "2", "-n", initHostNQN))
		guest(t, vm, 2*time.Minute, "nvmet.sh teardown; TRTYPE=tcp HOSTNQN="+initHostNQN+" SIZE_MB=128 nvmet.sh setup")
		hdir := "/sys/kernel/config/nvmet/hosts/" + initHostNQN
		guest(t, vm, time.Minute, fmt.Sprintf("echo %s > %s/dhchap_key && echo %s > %s/dhchap_ctrl_key && echo 'hmac(sha512)' > %s/dhchap_hash && echo ffdhe3072 > %s/dhchap_dhgroup",
			hostKey, hdir, ctrlKey, hdir, hdir, hdir))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := vm.WaitListening(ctx, 4420); err != nil {
			t.Fatal(err)
		}
		args := append(append([]string{"bench"}, fab...), "-n", kernelNQN, "-i", "2", "--runtime", "2s", "--size", "32m", "--verify", "--rw", "randrw", "--bs", "4k", "--iodepth", "8")
		h.must(append(args, "-S", hostKey)...)
		h.must(append(args, "-S", hostKey, "-C", ctrlKey, "-g", "-G")...)
		_, stderr, err := h.run(append(append([]string{"bench"}, fab...), "-n", kernelNQN, "--runtime", "1s", "-S", wrongKey)...)
		if err == nil || !strings.Contains(stderr, "authentication (qid 0)") {
			t.Fatalf("a wrong key: %v, want an authentication failure:\n%s", err, stderr)
		}
	})

	for _, l := range strings.Split(dmesgSince(t, vm, mark), "\n") {
		if strings.Contains(l, "BUG") || strings.Contains(l, "WARNING") || strings.Contains(l, "blocked for more") ||
			strings.Contains(l, "nvmet_tcp: ") && strings.Contains(l, "rror") && !strings.Contains(l, "authentication") {
			t.Errorf("guest kernel log: %s", l)
		}
	}
}
