package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/nvmetd/nvmetd/initiator"
	"github.com/nvmetd/nvmetd/nvmeof"
)

// connectOpts are connect's options: nvme-cli's, and ours for the local
// block device and the mount.
type connectOpts struct {
	fabrics fabricsOpts
	// mount, if set, is where the namespace's filesystem is mounted
	// (through a loop device on the FUSE file).
	mount     string
	loop      bool // attach a loop device without mounting
	mountNSID uint32
	fstype    string
	mkfs      bool
	// force lets --mkfs write over an existing filesystem or
	// partition table.
	force     bool
	mountOpts string
	// loopDirectIO is losetup's --direct-io for the loop device.
	loopDirectIO bool
	// fuseDirectIO opens the FUSE device files with FOPEN_DIRECT_IO (no
	// page cache of the FUSE file).
	fuseDirectIO bool
	output       string
	// metricsListen serves the controller's metrics (IP:port or
	// unix:/path; "" off).
	metricsListen string
	// iopolicy and fastIOFailTmo are the subsystem's multipath settings
	// (nvme-cli: the iopolicy sysfs attribute, --fast_io_fail_tmo).
	iopolicy      string
	fastIOFailTmo int
}

// connectOptsJSON carries connectOpts to the daemon.
type connectOptsJSON struct {
	Transport, Traddr, Trsvcid, NQN, HostNQN, HostID string
	NrIOQueues, QueueSize, KeepAliveTmo              int
	ReconnectDelay, CtrlLossTmo                      int
	CRC                                              string
	MaxFPDU                                          int
	ConnectTimeout, IOTimeout, BusyPoll              time.Duration
	MaxTransfer                                      int
	SocketBuffer                                     string
	Mount                                            string
	Loop                                             bool
	MountNSID                                        uint32
	FSType                                           string
	MKFS                                             bool
	Force                                            bool `json:",omitempty"`
	MountOpts                                        string
	LoopDirectIO, FUSEDirectIO                       bool
	// The secrets go to the daemon on its standard input, never on its
	// command line (which every user can read).
	DHCHAPSecret, DHCHAPCtrlSecret string `json:",omitempty"`
	MetricsListen                  string
	IOPolicy                       string
	FastIOFailTmo                  int
	HdrDigest, DataDigest          bool   `json:",omitempty"`
	TCPCongestion, TCPNotSentLowat string `json:",omitempty"`
}

func (o *connectOpts) toJSON() connectOptsJSON {
	f := &o.fabrics
	return connectOptsJSON{f.transport, f.traddr, f.trsvcid, f.nqn, f.hostnqn, f.hostid, f.nrIOQueues, f.queueSize,
		f.keepAliveTmo, f.reconnDelay, f.ctrlLossTmo, f.crc, f.maxFPDU, f.connTimeout, f.ioTimeout, f.busyPoll, f.maxTransfer, f.socketBuffer,
		o.mount, o.loop, o.mountNSID, o.fstype, o.mkfs, o.force, o.mountOpts, o.loopDirectIO, o.fuseDirectIO, f.dhchapSecret, f.dhchapCtrlSecret, o.metricsListen, o.iopolicy, o.fastIOFailTmo, f.hdrDigest, f.dataDigest, f.tcpCongestion, f.tcpNotSentLowat}
}

func (j connectOptsJSON) opts() connectOpts {
	return connectOpts{
		fabrics: fabricsOpts{transport: j.Transport, traddr: j.Traddr, trsvcid: j.Trsvcid, nqn: j.NQN, hostnqn: j.HostNQN,
			hostid: j.HostID, nrIOQueues: j.NrIOQueues, queueSize: j.QueueSize, keepAliveTmo: j.KeepAliveTmo,
			reconnDelay: j.ReconnectDelay, ctrlLossTmo: j.CtrlLossTmo, crc: j.CRC, maxFPDU: j.MaxFPDU, connTimeout: j.ConnectTimeout,
			ioTimeout: j.IOTimeout, busyPoll: j.BusyPoll, maxTransfer: j.MaxTransfer, socketBuffer: j.SocketBuffer,
			dhchapSecret: j.DHCHAPSecret, dhchapCtrlSecret: j.DHCHAPCtrlSecret, hdrDigest: j.HdrDigest, dataDigest: j.DataDigest,
			tcpCongestion: j.TCPCongestion, tcpNotSentLowat: j.TCPNotSentLowat},
		mount: j.Mount, loop: j.Loop, mountNSID: j.MountNSID, fstype: j.FSType, mkfs: j.MKFS, force: j.Force, mountOpts: j.MountOpts,
		loopDirectIO: j.LoopDirectIO, fuseDirectIO: j.FUSEDirectIO, metricsListen: j.MetricsListen, iopolicy: j.IOPolicy, fastIOFailTmo: j.FastIOFailTmo,
	}
}

func (o *connectOpts) addFlags(fs *pflag.FlagSet) {
	o.fabrics.addFlags(fs, true)
	fs.StringVar(&o.mount, "mount", "", "mount the namespace's filesystem on this directory (FUSE file, loop device, mount)")
	fs.BoolVar(&o.loop, "loop", false, "attach the namespace's file to a loop device (implied by --mount)")
	fs.Uint32Var(&o.mountNSID, "mount-nsid", 0, "namespace for --mount and --loop (default: the first)")
	fs.StringVar(&o.fstype, "fstype", "ext4", "filesystem type for --mount (ext4, xfs, ...)")
	fs.BoolVar(&o.mkfs, "mkfs", false, "make the filesystem first (mkfs.FSTYPE), only on a namespace that holds no filesystem or partition table")
	fs.BoolVar(&o.force, "force", false, "with --mkfs: make the filesystem even over an existing one or a partition table (erases the namespace)")
	fs.StringVar(&o.mountOpts, "mount-options", "", "mount -o options, after the default nosuid,nodev (give suid or dev to allow them)")
	fs.BoolVar(&o.loopDirectIO, "loop-direct-io", true, "the loop device does direct I/O on the FUSE file (losetup --direct-io)")
	fs.BoolVar(&o.fuseDirectIO, "fuse-direct-io", true, "the FUSE device files bypass the page cache (FOPEN_DIRECT_IO)")
	fs.StringVarP(&o.output, "output-format", "o", "normal", "output format: normal or json")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "serve the controller's Prometheus metrics on IP:port or unix:/path (per I/O queue: commands, bytes, in flight, latency)")
	fs.StringVar(&o.iopolicy, "iopolicy", "", "multipath I/O policy of the subsystem: numa (first optimized path), round-robin or queue-depth (default numa; given with a path to a connected subsystem, it changes the policy)")
	fs.IntVarP(&o.fastIOFailTmo, "fast-io-fail-tmo", "f", -1, "seconds a lost path may hold I/O before it fails when no other path is usable (-1: until ctrl-loss-tmo)")
	fs.StringVar(&stateDirFlag, "state-dir", "", "runtime directory (default /run/nvmeof or $XDG_RUNTIME_DIR/nvmeof)")
}

func runConnect(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("connect", stderr)
	var o connectOpts
	o.addFlags(fs)
	if code, ok := parse(fs, args, stderr); !ok {
		return code
	}
	if o.fabrics.nqn == "" {
		fmt.Fprintf(stderr, "connect: need a subsystem NQN (-n)\n")
		return exitUsage
	}
	if err := nvmeof.ValidateNQN(o.fabrics.nqn); err != nil {
		fmt.Fprintf(stderr, "connect: %v\n", err)
		return exitUsage
	}
	if _, err := o.fabrics.config(o.fabrics.nqn, nil); err != nil {
		fmt.Fprintf(stderr, "connect: %v\n", err)
		return exitUsage
	}
	if _, err := initiator.ParseIOPolicy(o.iopolicy); err != nil {
		fmt.Fprintf(stderr, "connect: %v\n", err)
		return exitUsage
	}
	addr, _ := o.fabrics.address()
	if dev := connectedTo(o.fabrics.nqn, addr); dev != "" {
		fmt.Fprintf(stderr, "connect: already connected to %s at %s (%s)\n", o.fabrics.nqn, addr, dev)
		return exitFailure
	}
	if dev := subsystemDevice(o.fabrics.nqn); dev != "" {
		// Another port of a connected subsystem: one more path of the
		// same device (nvme-cli: a new controller of the subsystem,
		// its namespaces joining the existing multipath disks).
		if o.mount != "" || o.loop {
			fmt.Fprintf(stderr, "connect: %s is connected as %s: this connect adds a path to it, and its namespaces are attached (--mount, --loop) once, by the first connect\n", o.fabrics.nqn, dev)
			return exitUsage
		}
		j := o.toJSON()
		r, err := ctlCall(dev, ctlRequest{Op: "add-path", Path: &j}, o.fabrics.connTimeout+time.Minute, nil)
		if err == nil && !r.OK {
			err = errors.New(r.Error)
		}
		if err != nil {
			return fail(stderr, "could not add path to "+dev, err)
		}
		if o.output == "json" {
			b, _ := json.MarshalIndent(map[string]any{"device": dev, "path": addr, "state": r.State}, "", "  ")
			fmt.Fprintf(stdout, "%s\n", b)
		} else {
			fmt.Fprintf(stdout, "added path %s to %s (%s, %d paths)\n", addr, dev, o.fabrics.nqn, len(r.State.Paths))
		}
		return exitOK
	}
	st, err := startDaemon(&o, stderr)
	if err != nil {
		return fail(stderr, "could not add new controller", err)
	}
	printConnected(stdout, st, o.output)
	return exitOK
}

// printConnected reports a new controller: its device name, like
// nvme-cli's "connecting to device: nvme0", with the local files.
func printConnected(w io.Writer, st *ctrlState, format string) {
	if format == "json" {
		b, _ := json.MarshalIndent(map[string]any{"device": st.Device, "state": st}, "", "  ")
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	fmt.Fprintf(w, "connecting to device: %s\n", st.Device)
	for _, ns := range st.Namespaces {
		line := fmt.Sprintf("  %sn%d: %s", st.Device, ns.NSID, ns.File)
		if ns.Loop != "" {
			line += " -> " + ns.Loop
		}
		if ns.Mount != "" {
			line += " mounted on " + ns.Mount + " (" + ns.FSType + ")"
		}
		fmt.Fprintln(w, line)
	}
}

// readyMsg is what the daemon reports once it is ready (or failed).
type readyMsg struct {
	OK    bool       `json:"ok"`
	Error string     `json:"error,omitempty"`
	State *ctrlState `json:"state,omitempty"`
}

// startDaemon claims a controller instance and starts "nvmeof serve" for
// it, detached (its own session, stdio to the log file), and waits until
// it reports the controller connected and its devices ready.
func startDaemon(o *connectOpts, stderr io.Writer) (*ctrlState, error) {
	dev, err := claimInstance()
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = removeInstance(dev)
		}
	}()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(stateDir(), dev+".log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	j := o.toJSON()
	secrets, _ := json.Marshal(daemonSecrets{j.DHCHAPSecret, j.DHCHAPCtrlSecret})
	j.DHCHAPSecret, j.DHCHAPCtrlSecret = "", ""
	cfg, _ := json.Marshal(j)
	cmd := exec.Command(self, "serve", "--instance", dev, "--state-dir", stateDir(), "--config", string(cfg))
	cmd.Stdin = bytes.NewReader(secrets) // read by serve (readSecrets)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{pw} // fd 3: the readiness pipe
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := startIOFlusher(cmd); err != nil {
		pw.Close()
		return nil, err
	}
	pw.Close()
	// The daemon reports once; it bounds its own connect attempt.
	msgc := make(chan readyMsg, 1)
	go func() {
		var m readyMsg
		line, err := bufio.NewReader(pr).ReadBytes('\n')
		if err != nil {
			m.Error = "the daemon exited before it was ready (see " + logPath + ")"
		} else if err := json.Unmarshal(line, &m); err != nil {
			m.Error = "bad readiness message: " + err.Error()
		}
		msgc <- m
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	m := <-msgc
	if !m.OK {
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if m.Error == "" {
			m.Error = "the daemon failed"
		}
		return nil, errors.New(m.Error)
	}
	// The daemon lives on; cmd.Wait's goroutine ends with this process.
	ok = true
	return m.State, nil
}

// startIOFlusher starts cmd from a thread marked PR_SET_IO_FLUSHER: the
// flag is inherited through fork and kept by execve, so every thread of
// the daemon has it. The daemon serves the loop device's I/O; without the
// flag its own memory allocations could wait on writeback of that very
// device (the FUSE/loop reclaim deadlock). Same as iscsid and NBD clients.
func startIOFlusher(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Not unlocked: the thread is discarded with this goroutine, so
		// the flag does not leak to other goroutines of this process.
		if err := unix.Prctl(unix.PR_SET_IO_FLUSHER, 1, 0, 0, 0); err != nil && !errors.Is(err, unix.EPERM) {
			errc <- fmt.Errorf("prctl(PR_SET_IO_FLUSHER): %w", err)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

// daemonSecrets are the DH-HMAC-CHAP secrets connect hands its daemon on
// the daemon's standard input.
type daemonSecrets struct {
	Secret, CtrlSecret string
}

// readSecrets reads the daemon's secrets from r (its standard input): one
// JSON object, or nothing.
func readSecrets(r io.Reader) (daemonSecrets, error) {
	var s daemonSecrets
	b, err := io.ReadAll(io.LimitReader(r, 1<<16))
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return s, err
	}
	err = json.Unmarshal(b, &s)
	return s, err
}
