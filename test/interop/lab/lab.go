// Package lab boots and drives the project's interop VM (test/lab) from Go
// tests: a QEMU guest with a stock Debian kernel, soft-iWARP (siw), nvme-rdma,
// nvmet-rdma, nvme-cli, rping and fio, to test nvmetd against the Linux kernel.
//
// A test binary gets its VM with [Start]. VMs are shared within the binary by
// [Options.Name]; use [Main] in TestMain so that one VM serves every test of the
// package and is stopped when the binary ends:
//
//	func TestMain(m *testing.M) { os.Exit(lab.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		vm := lab.Start(t, lab.Options{Forwards: []int{4420}})
//		out, err := vm.Exec(ctx, "nvmet.sh setup")
//		...
//	}
//
// Without Main, the VM is stopped when the last test using it ends, so each
// sequential test boots its own (about 12 s under TCG).
//
// Networking is QEMU user-mode networking (slirp): the guest is [VM.GuestAddr]
// (10.0.2.15); the guest reaches the host's 127.0.0.1:PORT at
// [VM.HostAddr]:PORT (10.0.2.2); the host reaches a guest TCP port at
// 127.0.0.1:[VM.ForwardedPort](port). Each VM has its own network, so several
// VMs (one per test binary) run side by side.
//
// A VM runs one of the lab's Debian kernel series ([Options.Kernel]): 6.1
// (Debian 12's own) or 6.12 (from bookworm's security updates). [Kernels]
// lists the series a test run covers; the interop tests run their whole suite
// against each in turn, and [StopKernel] stops one series' VMs before the next
// boots.
//
// Start runs test/lab/setup.sh for the VM's kernel first (under a second when
// the cache is up to date; a cold cache takes a minute or two per kernel, and
// its output is streamed to the test log). Tests skip, saying why, when the lab cannot run: not Linux,
// -short, or not root without a lab cache. The environment variables are:
//
//	NVMETD_LAB_KERNEL the kernel series to test, comma separated (default: 6.1,6.12)
//	NVMETD_LAB_CACHE  cache directory of setup.sh and vm.sh (default /var/cache/nvmetd-lab)
//	NVMETD_LAB_DIR    the test/lab directory (default: found from the working directory)
//	NVMETD_LAB_VM     use a VM started by hand (vm.sh start): an instance name or a
//	                  runtime directory; it is never stopped by the tests, and
//	                  its kernel is the default of NVMETD_LAB_KERNEL
//	NVMETD_LAB_KEEP=1 leave the VMs running after the tests (their vm.sh -r command is logged)
//	LAB_ACCEL         kvm, tcg or auto, passed to vm.sh (and vm.sh's other LAB_* variables)
//	NVMETD_LAB_CONSOLE_DIR where the whole console log of a VM whose kernel
//	                  reported an error is kept (default TMPDIR/nvmetd-crash-consoles);
//	                  a dead VM's error shows the console from before its first
//	                  kernel error (see FirstKernelError, KnownCause)
package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Guest network addresses under QEMU user networking.
const (
	// HostAddr is the address at which the guest reaches the host's loopback.
	HostAddr = "10.0.2.2"
	// GuestAddr is the guest's eth0 address.
	GuestAddr = "10.0.2.15"
)

// KnownKernels lists the kernel series test/lab/setup.sh builds, oldest first.
var KnownKernels = []string{"6.1", "6.12"}

// Kernels returns the kernel series to test: $NVMETD_LAB_KERNEL (comma or
// space separated), else the kernel of the VM named by $NVMETD_LAB_VM, else
// KnownKernels.
func Kernels() []string {
	if k := strings.Fields(strings.ReplaceAll(os.Getenv("NVMETD_LAB_KERNEL"), ",", " ")); len(k) > 0 {
		return k
	}
	if ext := os.Getenv("NVMETD_LAB_VM"); ext != "" {
		return []string{runDirKernel(externalRunDir(ext))}
	}
	return slices.Clone(KnownKernels)
}

// runDirKernel returns the kernel series that vm.sh recorded in a VM's
// runtime directory ("6.1" for a VM of a vm.sh that did not record it).
func runDirKernel(runDir string) string {
	b, err := os.ReadFile(filepath.Join(runDir, "kernel"))
	if k := strings.TrimSpace(string(b)); err == nil && k != "" {
		return k
	}
	return "6.1"
}

func externalRunDir(ext string) string {
	if strings.Contains(ext, "/") {
		return ext
	}
	return filepath.Join(cacheDir(), "run", ext)
}

// Options configures a VM. Start calls with the same Kernel and Name share
// one VM, so they must agree on SIW, MemMB, CPUs and Src; Forwards may differ
// (missing forwards are added to the running VM).
type Options struct {
	// Kernel is the guest kernel series, "6.1" or "6.12" (default: the
	// first of Kernels()).
	Kernel string
	// Name identifies the VM within the test binary and kernel (default "vm").
	Name string
	// Forwards lists guest TCP ports to forward from free ports on host
	// 127.0.0.1; see VM.ForwardedPort. More can be added later.
	Forwards []int
	// SIW lists the guest netdevs that get a soft-iWARP link at boot: "eth0"
	// (link siw0), "lo" (link siw_lo; but rdma_cm cannot use siw on lo with
	// the 6.1 kernel, see test/lab/README.md). nil means {"eth0"}; {"none"}
	// means none.
	SIW []string
	// MemMB is the guest RAM in MiB (default 2048).
	MemMB int
	// CPUs is the number of vCPUs (default 2).
	CPUs int
	// Src, if set, is a host directory mounted read-only at guest /src.
	Src string
	// BootTimeout bounds the boot (default 300 s under TCG, 120 s under KVM).
	BootTimeout time.Duration
}

func (o Options) normalized() Options {
	if o.Kernel == "" {
		o.Kernel = Kernels()[0]
	}
	if o.Name == "" {
		o.Name = "vm"
	}
	if o.SIW == nil {
		o.SIW = []string{"eth0"}
	}
	if o.MemMB == 0 {
		o.MemMB = 2048
	}
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	return o
}

func (o Options) compatible(p Options) bool {
	return slices.Equal(o.SIW, p.SIW) && o.MemMB == p.MemMB && o.CPUs == p.CPUs && o.Src == p.Src
}

// VM is a running lab guest. Its methods are safe for concurrent use.
type VM struct {
	name     string
	kernel   string // series, e.g. "6.12"
	release  string // uname -r of the guest, e.g. "6.12.117+deb12-amd64"
	runDir   string
	vmsh     string
	opts     Options
	external bool // started by hand (NVMETD_LAB_VM): never stopped here

	mu      sync.Mutex
	refs    int
	ports   map[int]int
	stopped bool

	keptConsole string // the copy of console.log that keepConsole made, if any

	buildMu sync.Mutex
	built   map[string]string // BuildAndPut: package -> guest path
}

// vmKey identifies a VM in the registry.
type vmKey struct{ kernel, name string }

var reg struct {
	mu    sync.Mutex
	vms   map[vmKey]*VM
	keep  bool             // inside Main: VMs live until Main returns (or StopKernel)
	setup map[string]error // by kernel series: setup.sh ran (once per binary), and its error
}

// Main runs the tests with m and then stops every VM that Start booted.
// Call it from TestMain: os.Exit(lab.Main(m)).
func Main(m *testing.M) int {
	reg.mu.Lock()
	reg.keep = true
	reg.mu.Unlock()
	code := m.Run()
	reg.mu.Lock()
	vms := reg.vms
	reg.vms = nil
	reg.mu.Unlock()
	for _, vm := range vms {
		if err := vm.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "lab: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// StopKernel stops every VM of the kernel series k that Start booted in this
// test binary (Main would stop them at the end): the interop tests call it
// when they are done with a kernel, so that one series' VMs do not idle while
// the next series runs. A later Start boots a new VM.
func StopKernel(k string) error {
	reg.mu.Lock()
	var stop []*VM
	for key, vm := range reg.vms {
		if key.kernel == k {
			stop = append(stop, vm)
			delete(reg.vms, key)
		}
	}
	reg.mu.Unlock()
	var errs []error
	for _, vm := range stop {
		errs = append(errs, vm.stop())
	}
	return errors.Join(errs...)
}

// Start returns the VM named opts.Name that runs opts.Kernel, booting it if
// this test binary has not yet done so. It skips the test when the lab cannot
// run here (with the reason) and fails it when the lab should run but does
// not. On failure of t, the guest's dmesg is written to the test log. See the
// package comment for when the VM is stopped.
func Start(t testing.TB, opts Options) *VM {
	t.Helper()
	opts = opts.normalized()
	labDir := preflight(t, opts.Kernel)

	reg.mu.Lock()
	defer reg.mu.Unlock()
	key := vmKey{opts.Kernel, opts.Name}
	vm := reg.vms[key]
	if vm != nil && !vm.alive() {
		t.Logf("lab: %s is no longer running; booting a new one; %s", vm, vm.crashReport())
		_ = vm.stop()
		delete(reg.vms, key)
		vm = nil
	}
	if vm == nil {
		var err error
		if vm, err = boot(t, labDir, opts); err != nil {
			t.Fatalf("lab: %v", err)
		}
		if reg.vms == nil {
			reg.vms = map[vmKey]*VM{}
		}
		reg.vms[key] = vm
	} else if !vm.opts.compatible(opts) {
		t.Fatalf("lab: VM %q (Linux %s) is already running with options %+v; cannot reuse it for %+v (use another Name)",
			opts.Name, opts.Kernel, vm.opts, opts)
	}
	for _, p := range opts.Forwards {
		if _, err := vm.AddForward(p); err != nil {
			t.Fatalf("lab: %v", err)
		}
	}
	vm.mu.Lock()
	vm.refs++
	vm.mu.Unlock()
	t.Cleanup(func() {
		if t.Failed() {
			if vm.alive() {
				t.Logf("lab: guest dmesg (last 60 lines) of %s:\n%s", vm, tail(vm.Dmesg(), 60))
			} else {
				t.Logf("lab: %s is not running (crashed or stopped); %s", vm, vm.crashReport())
			}
		}
		vm.mu.Lock()
		vm.refs--
		last := vm.refs == 0
		vm.mu.Unlock()
		reg.mu.Lock()
		defer reg.mu.Unlock()
		key := vmKey{vm.kernel, vm.name}
		if last && !reg.keep && reg.vms[key] == vm {
			delete(reg.vms, key)
			if err := vm.stop(); err != nil {
				t.Errorf("lab: %v", err)
			}
		}
	})
	return vm
}

// preflight skips t if the lab cannot run here, runs setup.sh for kernel
// series k (once per test binary) and returns the test/lab directory.
func preflight(t testing.TB, k string) string {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("lab: needs linux/amd64 (QEMU x86 guest); this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if testing.Short() {
		t.Skip("lab: skipped in -short mode: the interop tests boot a QEMU VM for each lab kernel (12–40 s each, more on a cold cache)")
	}
	labDir, err := findLabDir()
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	kdir := filepath.Join(cacheDir(), "linux-"+k)
	haveCache := fileExists(filepath.Join(kdir, "vmlinuz")) && fileExists(filepath.Join(kdir, "initrd.img"))

	if ext := os.Getenv("NVMETD_LAB_VM"); ext != "" {
		// The VM was started by hand; it runs the kernel it runs.
		if vk := runDirKernel(externalRunDir(ext)); vk != k {
			t.Skipf("lab: NVMETD_LAB_VM=%s runs Linux %s, and this test wants Linux %s (set NVMETD_LAB_KERNEL=%s, or start a %s VM)", ext, vk, k, vk, k)
		}
		return labDir
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if err, ran := reg.setup[k]; ran {
		if err != nil {
			t.Fatalf("lab: %v", err)
		}
		return labDir
	}
	if reg.setup == nil {
		reg.setup = map[string]error{}
	}
	if os.Geteuid() != 0 {
		if !haveCache {
			t.Skipf("lab: not root, and no Linux %s in the lab cache (%s): run `sudo NVMETD_LAB_KERNEL=%s %s/setup.sh` once (or run the tests as root)", k, kdir, k, labDir)
		}
		if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
			t.Skipf("lab: not root, and qemu-system-x86_64 is not installed: run `sudo %s/setup.sh`", labDir)
		}
		t.Logf("lab: not root: using Linux %s from the cache in %s as it is, without running setup.sh", k, kdir)
		reg.setup[k] = nil
		return labDir
	}
	if !haveCache {
		t.Logf("lab: no Linux %s in the lab cache (%s): running setup.sh (a cold setup takes a minute or two)", k, kdir)
	}
	start := time.Now()
	cmd := exec.Command(filepath.Join(labDir, "setup.sh"))
	cmd.Env = append(os.Environ(), "NVMETD_LAB_KERNEL="+k)
	if err = runLogged(t, cmd, "setup: "); err != nil {
		err = fmt.Errorf("NVMETD_LAB_KERNEL=%s %s/setup.sh: %w", k, labDir, err)
	}
	reg.setup[k] = err
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	t.Logf("lab: setup.sh (Linux %s) took %.1fs", k, time.Since(start).Seconds())
	return labDir
}

func boot(t testing.TB, labDir string, opts Options) (*VM, error) {
	vm := &VM{name: opts.Name, kernel: opts.Kernel, vmsh: filepath.Join(labDir, "vm.sh"), opts: opts}
	if ext := os.Getenv("NVMETD_LAB_VM"); ext != "" {
		vm.external = true
		vm.runDir = externalRunDir(ext)
		if !vm.alive() || !fileExists(filepath.Join(vm.runDir, "share/state/ready")) {
			return nil, fmt.Errorf("NVMETD_LAB_VM=%s: no ready VM in %s (start it with %s -r %s start)", ext, vm.runDir, vm.vmsh, vm.runDir)
		}
		vm.readRelease()
		t.Logf("lab: using the VM in %s (NVMETD_LAB_VM, Linux %s); its boot options are its own", vm.runDir, vm.release)
		return vm, vm.readPorts()
	}
	removeStaleRunDirs()
	dir, err := os.MkdirTemp("", "nvmetd-lab-"+sanitize(opts.Name)+"-"+sanitize(opts.Kernel)+"-")
	if err != nil {
		return nil, err
	}
	vm.runDir = dir
	if err := os.WriteFile(filepath.Join(dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, err
	}
	fwd := make([]string, len(opts.Forwards))
	for i, p := range opts.Forwards {
		fwd[i] = strconv.Itoa(p)
	}
	cmd := exec.Command(vm.vmsh, "-r", dir, "start")
	cmd.Env = append(os.Environ(),
		"NVMETD_LAB_KERNEL="+opts.Kernel,
		"LAB_FWD="+strings.Join(fwd, ","),
		"LAB_SIW="+strings.Join(opts.SIW, ","),
		"LAB_MEM="+strconv.Itoa(opts.MemMB),
		"LAB_SMP="+strconv.Itoa(opts.CPUs),
		"LAB_SRC="+opts.Src,
		"LAB_WATCH_PID="+strconv.Itoa(os.Getpid()),
	)
	if opts.BootTimeout > 0 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("LAB_BOOT_TIMEOUT=%d", int(opts.BootTimeout.Seconds())))
	}
	start := time.Now()
	if err := runLogged(t, cmd, "vm.sh: "); err != nil {
		// A kernel that died while booting: report its first error (and
		// keep the console) before stop removes the runtime directory.
		var rep string
		if FirstKernelError(vm.ConsoleLog()) != "" {
			rep = "; the guest kernel died while booting: " + vm.crashReport()
		}
		_ = vm.stop()
		return nil, fmt.Errorf("booting VM %q (Linux %s): %w%s", opts.Name, opts.Kernel, err, rep)
	}
	vm.readRelease()
	t.Logf("lab: %s ready in %.1fs; by hand: %s -r %s exec|console|log|dmesg", vm,
		time.Since(start).Seconds(), vm.vmsh, dir)
	return vm, vm.readPorts()
}

// readRelease sets vm.release from the guest's ready file (its uname -r),
// or to the series if the file does not say.
func (vm *VM) readRelease() {
	vm.release = vm.kernel
	b, _ := os.ReadFile(filepath.Join(vm.runDir, "share", "state", "ready"))
	for _, l := range strings.Split(string(b), "\n") {
		if r, ok := strings.CutPrefix(l, "kernel="); ok && r != "" {
			vm.release = r
		}
	}
}

// removeStaleRunDirs removes the runtime directories of VMs whose test
// binary was killed (the watchdog of vm.sh has then stopped their qemu).
func removeStaleRunDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "nvmetd-lab-*"))
	for _, d := range dirs {
		owner, err := os.ReadFile(filepath.Join(d, "owner.pid"))
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(string(owner)); err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil {
			continue
		}
		if (&VM{runDir: d}).alive() {
			continue
		}
		_ = os.RemoveAll(d)
	}
}

// stop powers the VM off and removes its runtime directory (unless the VM
// was started by hand, or NVMETD_LAB_KEEP=1).
func (vm *VM) stop() error {
	// A VM whose kernel reported an error keeps its console log: the
	// runtime directory goes, and with it the first oops otherwise.
	if !vm.external && FirstKernelError(vm.ConsoleLog()) != "" {
		if p, err := vm.keepConsole(); err == nil {
			fmt.Fprintf(os.Stderr, "lab: %s: its kernel reported an error; its console log is kept in %s\n", vm, p)
		}
	}
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.stopped || vm.external {
		return nil
	}
	vm.stopped = true
	if os.Getenv("NVMETD_LAB_KEEP") == "1" {
		fmt.Fprintf(os.Stderr, "lab: NVMETD_LAB_KEEP=1: %s left running: %s -r %s stop\n", vm, vm.vmsh, vm.runDir)
		return nil
	}
	out, err := exec.Command(vm.vmsh, "-r", vm.runDir, "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("stopping %s: %v: %s", vm, err, out)
	}
	return os.RemoveAll(vm.runDir)
}

// Name returns the VM's name (Options.Name).
func (vm *VM) Name() string { return vm.name }

// String names the VM and its kernel, e.g. `VM "vm" (Linux 6.12.117+deb12-amd64)`,
// as the harness's messages do.
func (vm *VM) String() string { return fmt.Sprintf("VM %q (Linux %s)", vm.name, vm.Release()) }

// Kernel returns the VM's kernel series (Options.Kernel), e.g. "6.12".
func (vm *VM) Kernel() string { return vm.kernel }

// Release returns the guest kernel's release (uname -r), e.g.
// "6.12.117+deb12-amd64".
func (vm *VM) Release() string {
	if vm.release == "" {
		return vm.kernel
	}
	return vm.release
}

// VMSh returns the command test/lab/vm.sh -r RUNDIR args..., which acts on
// this VM (exec, dmesg, log, ...).
func (vm *VM) VMSh(args ...string) *exec.Cmd {
	return exec.Command(vm.vmsh, append([]string{"-r", vm.runDir}, args...)...)
}

// RunDir returns the VM's runtime directory, for test/lab/vm.sh -r RUNDIR.
func (vm *VM) RunDir() string { return vm.runDir }

// HostAddr returns the address at which the guest reaches the host's
// 127.0.0.1 (10.0.2.2): a host listener on 127.0.0.1:PORT is 10.0.2.2:PORT.
func (vm *VM) HostAddr() string { return HostAddr }

// GuestAddr returns the guest's eth0 address (10.0.2.15), where a guest
// service listens for in-guest peers; the host uses ForwardedPort instead.
func (vm *VM) GuestAddr() string { return GuestAddr }

// ForwardedPort returns the host port on 127.0.0.1 that QEMU forwards to the
// guest's TCP port guestPort, adding the forward from a free host port if
// there is none yet. It panics if QEMU refuses the forward; use AddForward to
// get that as an error. Under slirp a host connect to a forwarded port
// succeeds even when nothing listens in the guest: the missing listener only
// shows as EOF or a reset, so wait for the guest listener first (see
// WaitListening).
func (vm *VM) ForwardedPort(guestPort int) int {
	p, err := vm.AddForward(guestPort)
	if err != nil {
		panic("lab: " + err.Error())
	}
	return p
}

// AddForward is ForwardedPort with an error instead of a panic.
func (vm *VM) AddForward(guestPort int) (int, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if p, ok := vm.ports[guestPort]; ok {
		return p, nil
	}
	out, err := exec.Command(vm.vmsh, "-r", vm.runDir, "port", strconv.Itoa(guestPort)).Output()
	if err != nil {
		return 0, fmt.Errorf("forwarding guest port %d of %s: %v: %s", guestPort, vm, err, stderrOf(err))
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 0, fmt.Errorf("forwarding guest port %d of %s: vm.sh port said %q", guestPort, vm, out)
	}
	if vm.ports == nil {
		vm.ports = map[int]int{}
	}
	vm.ports[guestPort] = p
	return p, nil
}

func (vm *VM) readPorts() error {
	b, err := os.ReadFile(filepath.Join(vm.runDir, "ports"))
	if err != nil {
		return fmt.Errorf("%s: %w", vm, err)
	}
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.ports = map[int]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var g, h int
		if _, err := fmt.Sscan(line, &g, &h); err == nil {
			vm.ports[g] = h
		}
	}
	return nil
}

// alive reports whether the VM's qemu process exists.
func (vm *VM) alive() bool {
	b, err := os.ReadFile(filepath.Join(vm.runDir, "qemu.pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false
	}
	// The pid must still be this VM's qemu, not a reused pid.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(cmdline), vm.runDir+"/qemu.pid")
}

// ConsoleLog returns the guest's serial console output (kernel log and the
// init script's messages) since boot.
func (vm *VM) ConsoleLog() string {
	b, err := os.ReadFile(filepath.Join(vm.runDir, "console.log"))
	if err != nil {
		return fmt.Sprintf("(no console log: %v)", err)
	}
	return string(b)
}

// Dmesg returns the guest's kernel log, for failure diagnostics. If the guest
// does not answer, it returns the serial console log instead (which has the
// kernel log up to a crash).
func (vm *VM) Dmesg() string {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := vm.Exec(ctx, "dmesg")
	if err == nil {
		return out
	}
	return fmt.Sprintf("(guest dmesg failed: %v; serial console follows)\n%s", err, vm.ConsoleLog())
}

// runLogged runs cmd with its output streamed, line by line, to t's log.
func runLogged(t testing.TB, cmd *exec.Cmd, prefix string) error {
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	done := make(chan []string)
	go func() {
		var last []string
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			t.Log(prefix + sc.Text())
			last = append(last, sc.Text())
			if len(last) > 50 {
				last = last[1:]
			}
		}
		_, _ = io.Copy(io.Discard, pr)
		done <- last
	}()
	err := cmd.Run()
	pw.Close()
	last := <-done
	if err != nil {
		return fmt.Errorf("%v (last output: %s)", err, strings.Join(last[max(0, len(last)-5):], " | "))
	}
	return nil
}

func cacheDir() string {
	if c := os.Getenv("NVMETD_LAB_CACHE"); c != "" {
		return c
	}
	return "/var/cache/nvmetd-lab"
}

// findLabDir locates test/lab: $NVMETD_LAB_DIR, or test/lab under the module
// root found upwards from the working directory (a test's package directory).
func findLabDir() (string, error) {
	if d := os.Getenv("NVMETD_LAB_DIR"); d != "" {
		return filepath.Abs(d)
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	d := filepath.Join(root, "test", "lab")
	if !fileExists(filepath.Join(d, "vm.sh")) {
		return "", fmt.Errorf("no %s/vm.sh (set NVMETD_LAB_DIR)", d)
	}
	return d, nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if fileExists(filepath.Join(d, "go.mod")) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("no go.mod above " + dir)
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
