package interop_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/nvmetd/nvmetd/nvmeof/auth"
	"github.com/nvmetd/nvmetd/target"
	"github.com/nvmetd/nvmetd/test/interop/lab"
)

// The authentication interop test: DH-HMAC-CHAP (NVMe in-band
// authentication) between nvmetd and Linux, both ways.
//
//   - The kernel host (nvme connect -t rdma and -t tcp --dhchap-secret, with and
//     without --dhchap-ctrl-secret) against the nvmetd target, which
//     requires authentication of that host: it connects, authenticates the
//     admin queue and every I/O queue, and fio verifies its writes; a wrong
//     key is refused cleanly (nvme connect fails at once, the kernel logs
//     the authentication failure, the target holds no controller).
//   - nvmeof (bench -S -C) against the kernel target (nvmet, configfs
//     dhchap_key, dhchap_ctrl_key, dhchap_hash, dhchap_dhgroup on the host
//     entry): verified I/O; a wrong key or a wrong controller key is
//     refused.
//   - Keys: the host key of the first half is made by the guest's
//     nvme gen-dhchap-key and used by nvmetd; the controller key by nvmeof's
//     GenerateKey and used by the kernel host; in the second half the other
//     way round.
//
// Linux 6.1 cannot take part: Debian's 6.1 kernel is built with
// CONFIG_NVME_AUTH (the host's DH-HMAC-CHAP in 6.1) and
// CONFIG_NVME_TARGET_AUTH unset: its host ignores --dhchap-secret and its
// target has no dhchap_* attributes. Debian's 6.12 has CONFIG_NVME_HOST_AUTH
// and CONFIG_NVME_TARGET_AUTH.

const authNQN = "nqn.2024-01.io.nvmetd.interop:auth"

func testAuth(t *testing.T, k kernel) {
	if k == "6.1" {
		t.Skip("Linux 6.1 (Debian 6.1.0-56) is built with CONFIG_NVME_AUTH and CONFIG_NVME_TARGET_AUTH unset: " +
			"neither its NVMe host nor its target implements DH-HMAC-CHAP; this test runs against 6.12 (CONFIG_NVME_HOST_AUTH=y, CONFIG_NVME_TARGET_AUTH=y)")
	}
	opts := k.opts(labOpts)
	opts.Forwards = []int{4420, 4421}
	vm := startHealthy(t, opts)
	t.Run("kernel-host", func(t *testing.T) { testAuthKernelHost(t, vm, target.TransportRDMA) })
	// The same over NVMe/TCP (nvme-tcp, no siw): issue 24.
	t.Run("kernel-host-tcp", func(t *testing.T) { testAuthKernelHost(t, vm, target.TransportTCP) })
	t.Run("kernel-target", func(t *testing.T) { testAuthKernelTarget(t, vm) })
}

// authFailureRE matches the kernel's authentication failure messages (host:
// "qid 0: authentication failed", "qid 0: controller authentication
// failed"; target: "nvmet: ... authentication failed" and the like).
var authFailureRE = regexp.MustCompile(`(?i)(auth\w*\s+(failed|error)|failed to authenticate|dhchap.*fail)`)

func testAuthKernelHost(t *testing.T, vm *lab.VM, transport string) {
	hostNQN := strings.TrimSpace(step(t, vm, time.Minute, "cat /etc/nvme/hostnqn"))
	// The host key comes from the guest's nvme-cli; the controller key
	// from ours.
	hostKey := strings.TrimSpace(step(t, vm, time.Minute, "nvme gen-dhchap-key -m 1 -n "+hostNQN))
	if _, err := auth.ParseSecret(hostKey); err != nil {
		t.Fatalf("nvme gen-dhchap-key made %q: %v", hostKey, err)
	}
	ctrlKey, err := auth.GenerateKey(auth.KeyOptions{HMAC: 2, NQN: authNQN}, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	wrongKey := strings.TrimSpace(step(t, vm, time.Minute, "nvme gen-dhchap-key -m 1 -n "+hostNQN))

	port := freeTCPPort(t)
	cfg := &target.Config{
		Ports: []target.PortConfig{{ID: 1, Address: "127.0.0.1", ServiceID: port, Transport: transport, Subsystems: []string{authNQN}}},
		Subsystems: []target.SubsystemConfig{{
			NQN: authNQN, AllowedHosts: []string{hostNQN}, AuthRequired: true, Model: "nvmetd auth interop",
			Namespaces: []target.NamespaceConfig{{NSID: 1, Backend: target.BackendConfig{Kind: "file", Path: filepath.Join(t.TempDir(), "ns1.img"), Size: "128MiB"}}},
		}},
		Hosts: []target.HostConfig{{NQN: hostNQN, DHCHAPKey: hostKey, DHCHAPCtrlKey: ctrlKey, DHCHAPHash: "hmac(sha384)", DHCHAPDHGroup: "ffdhe2048"}},
	}
	obs, logs := observer.New(zap.InfoLevel)
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Core(), obs))
	tgt, err := target.New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := tgt.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tgt.Shutdown(ctx); err != nil {
			t.Errorf("target shutdown: %v", err)
		}
	}()
	defer vm.Exec(context.Background(), "nvme disconnect -n "+authNQN+" >/dev/null 2>&1; true")
	base := fmt.Sprintf("nvme connect -t %s -a %s -s %d -n %s -i 2", transport, vm.HostAddr(), port, authNQN)
	authenticated := func() int { return logs.FilterMessage("host authenticated").Len() }

	run := func(t *testing.T, connect string) {
		before := authenticated()
		step(t, vm, 2*time.Minute, connect)
		ctrl := waitControllerOf(t, vm, authNQN)
		step(t, vm, time.Minute, fmt.Sprintf("for f in state queue_count dhchap_secret dhchap_ctrl_secret; do echo $f: $(cat /sys/class/nvme/%s/$f 2>&1 | cut -c1-12); done", ctrl))
		if qc := strings.TrimSpace(step(t, vm, time.Minute, "cat /sys/class/nvme/"+ctrl+"/queue_count")); qc != "3" {
			t.Fatalf("queue_count %s, want 3", qc)
		}
		if authenticated() != before+1 {
			t.Fatalf("the target did not log the host's authentication")
		}
		ns := nsDeviceOf(t, vm, authNQN, 1)
		out := step(t, vm, 4*time.Minute, "fio --ioengine=libaio --direct=1 --verify=crc32c --do_verify=1 --verify_fatal=1 --group_reporting "+
			"--name=auth --filename=/dev/"+ns+" --rw=randwrite --bs=4k-64k --size=32M --numjobs=2 --iodepth=8 --offset_increment=48M 2>&1 | grep -E 'err=|READ:|WRITE:|verify|error'")
		if !strings.Contains(out, "err= 0") {
			t.Fatalf("fio reported errors")
		}
		step(t, vm, time.Minute, "nvme disconnect -n "+authNQN)
	}
	t.Run("unidirectional", func(t *testing.T) { run(t, base+" --dhchap-secret="+hostKey) })
	t.Run("bidirectional", func(t *testing.T) { run(t, base+" --dhchap-secret="+hostKey+" --dhchap-ctrl-secret="+ctrlKey) })
	// refused runs nvme connect with secrets that must be refused: it
	// fails at once, the kernel and the target log the failure, and the
	// target holds no controller after it.
	refused := func(t *testing.T, what, secrets string) {
		// The target's failure is read from its counter
		// (nvmetd_auth_failures_total), not from its log, which is rate
		// limited (ratelog: 5 per 10 s, then a summary).
		mark := kmsgMark(t, vm)
		failures := authFailures(t, tgt)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		start := time.Now()
		out, err := vm.Exec(ctx, base+" "+secrets+" 2>&1")
		t.Logf("guest$ nvme connect ... (%s)   (%s, %v)\n%s", what, time.Since(start).Round(time.Millisecond), err, out)
		if err == nil {
			t.Fatalf("nvme connect with %s succeeded", what)
		}
		dmesg := dmesgSince(t, vm, mark)
		t.Logf("kernel log:\n%s", dmesg)
		if !authFailureRE.MatchString(dmesg) {
			t.Errorf("the kernel logged no authentication failure")
		}
		if authFailures(t, tgt) == failures {
			t.Errorf("the target counted no authentication failure")
		}
		waitNoControllers(t, tgt)
	}
	t.Run("wrong-key", func(t *testing.T) { refused(t, "a wrong key", "--dhchap-secret="+wrongKey) })
	t.Run("wrong-ctrl-key", func(t *testing.T) {
		bad, _ := auth.GenerateKey(auth.KeyOptions{HMAC: 2, NQN: authNQN}, rand.Reader)
		refused(t, "a wrong controller key", "--dhchap-secret="+hostKey+" --dhchap-ctrl-secret="+bad)
	})
}

// waitNoControllers waits until the target holds no controller.
func waitNoControllers(t *testing.T, tgt *target.Target) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(tgt.Status().Controllers) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("controllers left: %+v", tgt.Status().Controllers)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testAuthKernelTarget(t *testing.T, vm *lab.VM) {
	// The host key comes from our nvmeof gen-dhchap-key; the controller
	// key from the guest's nvme-cli.
	h := &hostCLI{t: t, bin: buildNvmeof(t), state: t.TempDir()}
	hostKey := strings.TrimSpace(h.must("gen-dhchap-key", "-m", "2", "-n", initHostNQN))
	ctrlKey := strings.TrimSpace(guest(t, vm, time.Minute, "nvme gen-dhchap-key -m 3 -n "+kernelNQN))
	wrongKey := strings.TrimSpace(h.must("gen-dhchap-key", "-m", "2", "-n", initHostNQN))
	guest(t, vm, 2*time.Minute, "nvmet.sh teardown; HOSTNQN="+initHostNQN+" SIZE_MB=128 nvmet.sh setup")
	defer vm.Exec(context.Background(), "nvmet.sh teardown >/dev/null 2>&1")
	hdir := "/sys/kernel/config/nvmet/hosts/" + initHostNQN
	guest(t, vm, time.Minute, fmt.Sprintf("echo %s > %s/dhchap_key && echo %s > %s/dhchap_ctrl_key && echo 'hmac(sha512)' > %s/dhchap_hash && echo ffdhe3072 > %s/dhchap_dhgroup && "+
		"for f in dhchap_hash dhchap_dhgroup; do echo $f: $(cat %s/$f); done", hostKey, hdir, ctrlKey, hdir, hdir, hdir, hdir))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := vm.WaitListening(ctx, 4420); err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(vm.ForwardedPort(4420))
	fab := []string{"-t", "rdma", "-a", "127.0.0.1", "-s", port, "-q", initHostNQN, "-n", kernelNQN}
	bench := func(t *testing.T, secrets ...string) {
		h.t = t
		args := append(append([]string{"bench"}, fab...), "-i", "2", "--runtime", "3s", "--size", "32m", "--verify", "--rw", "randrw", "--bs", "4k", "--iodepth", "8")
		out := h.must(append(args, secrets...)...)
		if !strings.Contains(out, "verif") {
			t.Logf("bench:\n%s", out)
		}
	}
	t.Run("unidirectional", func(t *testing.T) { bench(t, "-S", hostKey) })
	t.Run("bidirectional", func(t *testing.T) { bench(t, "-S", hostKey, "-C", ctrlKey) })
	t.Run("connect", func(t *testing.T) {
		h.t = t
		if os.Geteuid() != 0 {
			t.Skip("needs root: nvmeof connect mounts the namespaces' FUSE files")
		}
		keyFile := filepath.Join(t.TempDir(), "ctrl.key")
		if err := os.WriteFile(keyFile, []byte(ctrlKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		h.must(append([]string{"connect", "-i", "2", "-S", hostKey, "-C", "file:" + keyFile}, fab...)...)
		if out := h.must("list"); !strings.Contains(out, kernelNQN) {
			t.Fatalf("list:\n%s", out)
		}
		h.must("disconnect", "-n", kernelNQN)
	})
	refused := func(t *testing.T, want string, secrets ...string) {
		h.t = t
		mark := kmsgMark(t, vm)
		_, stderr, err := h.run(append(append(append([]string{"bench"}, fab...), "--runtime", "1s"), secrets...)...)
		if err == nil || !strings.Contains(stderr, want) {
			t.Fatalf("bench: %v, want a failure with %q:\n%s", err, want, stderr)
		}
		t.Logf("kernel log:\n%s", dmesgSince(t, vm, mark))
	}
	t.Run("wrong-key", func(t *testing.T) { refused(t, "authentication (qid 0)", "-S", wrongKey) })
	t.Run("wrong-ctrl-key", func(t *testing.T) {
		bad := strings.TrimSpace(h.must("gen-dhchap-key", "-m", "3", "-n", kernelNQN))
		refused(t, "controller authentication failed", "-S", hostKey, "-C", bad)
	})
	t.Run("no-key", func(t *testing.T) { refused(t, "no DH-HMAC-CHAP secret") })
}

// waitControllerOf returns the name (nvmeN) of the guest's controller of
// subsystem nqn once it is live.
func waitControllerOf(t *testing.T, vm *lab.VM, nqn string) string {
	t.Helper()
	out := step(t, vm, time.Minute, fmt.Sprintf(
		`for i in $(seq 1 100); do for c in /sys/class/nvme/nvme*; do `+
			`[ "$(cat $c/subsysnqn 2>/dev/null)" = %s ] && [ "$(cat $c/state)" = live ] && basename $c && exit 0; done; sleep 0.1; done; exit 1`, nqn))
	return strings.TrimSpace(out)
}

// nsDeviceOf returns the block device (nvmeXnY) of namespace nsid of
// subsystem nqn (see nsDevice).
func nsDeviceOf(t *testing.T, vm *lab.VM, nqn string, nsid int) string {
	t.Helper()
	out := step(t, vm, time.Minute, fmt.Sprintf(
		`for i in $(seq 1 100); do for b in /sys/block/nvme*n*; do `+
			`[ "$(cat $b/device/subsysnqn 2>/dev/null)" = %s ] && [ "$(cat $b/nsid 2>/dev/null)" = %d ] && [ -b /dev/$(basename $b) ] && [ "$(cat $b/size)" -gt 0 ] && basename $b && exit 0; done; sleep 0.1; done; exit 1`, nqn, nsid))
	return strings.TrimSpace(out)
}

// authFailures sums the target's nvmetd_auth_failures_total series.
func authFailures(t *testing.T, tgt *target.Target) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(tgt.MetricsCollector(0)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if strings.HasSuffix(mf.GetName(), "auth_failures_total") {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
