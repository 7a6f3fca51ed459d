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
// Start runs test/lab/setup.sh first (about 0.3 s when the cache is up to
// date; a cold cache takes under a minute, 43 s on a fresh Debian 12, and its
// output is streamed to the test log). Tests skip, saying why, when the lab cannot run: not Linux,
// -short, or not root without a lab cache. The environment variables are:
//
//	NVMETD_LAB_CACHE  cache directory of setup.sh and vm.sh (default /var/cache/nvmetd-lab)
//	NVMETD_LAB_DIR    the test/lab directory (default: found from the working directory)
//	NVMETD_LAB_VM     use a VM started by hand (vm.sh start): an instance name or a
//	                  runtime directory; it is never stopped by the tests
//	NVMETD_LAB_KEEP=1 leave the VMs running after the tests (their vm.sh -r command is logged)
//	LAB_ACCEL         kvm, tcg or auto, passed to vm.sh
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

// Options configures a VM. Start calls with the same Name share one VM, so
// they must agree on SIW, MemMB, CPUs and Src; Forwards may differ (missing
// forwards are added to the running VM).
type Options struct {
	// Name identifies the VM within the test binary (default "vm").
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
	runDir   string
	vmsh     string
	opts     Options
	external bool // started by hand (NVMETD_LAB_VM): never stopped here

	mu      sync.Mutex
	refs    int
	ports   map[int]int
	stopped bool

	buildMu sync.Mutex
	built   map[string]string // BuildAndPut: package -> guest path
}

var reg struct {
	mu       sync.Mutex
	vms      map[string]*VM
	keep     bool // inside Main: VMs live until Main returns
	setupErr error
	setupRan bool
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

// Start returns the VM named opts.Name, booting it if this test binary has
// not yet done so. It skips the test when the lab cannot run here (with the
// reason) and fails it when the lab should run but does not. On failure of t,
// the guest's dmesg is written to the test log. See the package comment for
// when the VM is stopped.
func Start(t testing.TB, opts Options) *VM {
	t.Helper()
	opts = opts.normalized()
	labDir := preflight(t)

	reg.mu.Lock()
	defer reg.mu.Unlock()
	vm := reg.vms[opts.Name]
	if vm != nil && !vm.alive() {
		t.Logf("lab: VM %q is no longer running; booting a new one", opts.Name)
		_ = vm.stop()
		delete(reg.vms, opts.Name)
		vm = nil
	}
	if vm == nil {
		var err error
		if vm, err = boot(t, labDir, opts); err != nil {
			t.Fatalf("lab: %v", err)
		}
		if reg.vms == nil {
			reg.vms = map[string]*VM{}
		}
		reg.vms[opts.Name] = vm
	} else if !vm.opts.compatible(opts) {
		t.Fatalf("lab: VM %q is already running with options %+v; cannot reuse it for %+v (use another Name)",
			opts.Name, vm.opts, opts)
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
			t.Logf("lab: guest dmesg (last 60 lines) of VM %q:\n%s", vm.name, tail(vm.Dmesg(), 60))
		}
		vm.mu.Lock()
		vm.refs--
		last := vm.refs == 0
		vm.mu.Unlock()
		reg.mu.Lock()
		defer reg.mu.Unlock()
		if last && !reg.keep && reg.vms[vm.name] == vm {
			delete(reg.vms, vm.name)
			if err := vm.stop(); err != nil {
				t.Errorf("lab: %v", err)
			}
		}
	})
	return vm
}

// preflight skips t if the lab cannot run here, runs setup.sh (once per test
// binary) and returns the test/lab directory.
func preflight(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("lab: needs linux/amd64 (QEMU x86 guest); this is %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if testing.Short() {
		t.Skip("lab: skipped in -short mode: the interop tests boot a QEMU VM (about 12 s, more on a cold cache)")
	}
	labDir, err := findLabDir()
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	cache := cacheDir()
	haveCache := fileExists(filepath.Join(cache, "vmlinuz")) && fileExists(filepath.Join(cache, "initrd.img"))

	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.setupRan {
		if reg.setupErr != nil {
			t.Fatalf("lab: %v", reg.setupErr)
		}
		return labDir
	}
	if os.Geteuid() != 0 {
		if !haveCache {
			t.Skipf("lab: not root, and no lab cache in %s: run `sudo %s/setup.sh` once (or run the tests as root)", cache, labDir)
		}
		if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
			t.Skipf("lab: not root, and qemu-system-x86_64 is not installed: run `sudo %s/setup.sh`", labDir)
		}
		t.Logf("lab: not root: using the cache in %s as it is, without running setup.sh", cache)
		reg.setupRan = true
		return labDir
	}
	if os.Getenv("NVMETD_LAB_VM") != "" {
		reg.setupRan = true // the VM was started by hand
		return labDir
	}
	if !haveCache {
		t.Logf("lab: no lab cache in %s: running setup.sh (a cold setup takes a few minutes)", cache)
	}
	start := time.Now()
	reg.setupErr = runLogged(t, exec.Command(filepath.Join(labDir, "setup.sh")), "setup: ")
	reg.setupRan = true
	if reg.setupErr != nil {
		reg.setupErr = fmt.Errorf("%s/setup.sh: %w", labDir, reg.setupErr)
		t.Fatalf("lab: %v", reg.setupErr)
	}
	t.Logf("lab: setup.sh took %.1fs", time.Since(start).Seconds())
	return labDir
}

func boot(t testing.TB, labDir string, opts Options) (*VM, error) {
	vm := &VM{name: opts.Name, vmsh: filepath.Join(labDir, "vm.sh"), opts: opts}
	if ext := os.Getenv("NVMETD_LAB_VM"); ext != "" {
		vm.external = true
		vm.runDir = ext
		if !strings.Contains(ext, "/") {
			vm.runDir = filepath.Join(cacheDir(), "run", ext)
		}
		if !vm.alive() || !fileExists(filepath.Join(vm.runDir, "share/state/ready")) {
			return nil, fmt.Errorf("NVMETD_LAB_VM=%s: no ready VM in %s (start it with %s -r %s start)", ext, vm.runDir, vm.vmsh, vm.runDir)
		}
		t.Logf("lab: using the VM in %s (NVMETD_LAB_VM); its boot options are its own", vm.runDir)
		return vm, vm.readPorts()
	}
	removeStaleRunDirs()
	dir, err := os.MkdirTemp("", "nvmetd-lab-"+sanitize(opts.Name)+"-")
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
		_ = vm.stop()
		return nil, fmt.Errorf("booting VM %q: %w", opts.Name, err)
	}
	t.Logf("lab: VM %q ready in %.1fs; by hand: %s -r %s exec|console|log|dmesg", opts.Name,
		time.Since(start).Seconds(), vm.vmsh, dir)
	return vm, vm.readPorts()
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
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.stopped || vm.external {
		return nil
	}
	vm.stopped = true
	if os.Getenv("NVMETD_LAB_KEEP") == "1" {
		fmt.Fprintf(os.Stderr, "lab: NVMETD_LAB_KEEP=1: VM %q left running: %s -r %s stop\n", vm.name, vm.vmsh, vm.runDir)
		return nil
	}
	out, err := exec.Command(vm.vmsh, "-r", vm.runDir, "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("stopping VM %q: %v: %s", vm.name, err, out)
	}
	return os.RemoveAll(vm.runDir)
}

// Name returns the VM's name (Options.Name).
func (vm *VM) Name() string { return vm.name }

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
		return 0, fmt.Errorf("forwarding guest port %d of VM %q: %v: %s", guestPort, vm.name, err, stderrOf(err))
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 0, fmt.Errorf("forwarding guest port %d of VM %q: vm.sh port said %q", guestPort, vm.name, out)
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
		return fmt.Errorf("VM %q: %w", vm.name, err)
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
