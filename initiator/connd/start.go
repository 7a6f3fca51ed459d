package connd

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

	"golang.org/x/sys/unix"

	"github.com/nvmetd/nvmetd/initiator/hoststate"
)

// readyMsg is what the daemon reports once it is ready (or failed).
type readyMsg struct {
	OK    bool                  `json:"ok"`
	Error string                `json:"error,omitempty"`
	State *hoststate.Controller `json:"state,omitempty"`
}

// Start claims a controller instance in s and starts "nvmeof serve" for
// it (this program, re-executed), detached (its own session, stdio to the
// log file), and waits until it reports the controller connected and its
// devices ready.
func Start(s hoststate.Store, o *Options) (*hoststate.Controller, error) {
	dev, err := s.Claim()
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = s.Remove(dev)
		}
	}()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(s.Dir, dev+".log")
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
	cmd := exec.Command(self, "serve", "--instance", dev, "--state-dir", s.Dir, "--config", string(cfg))
	cmd.Stdin = bytes.NewReader(secrets) // read by serve (ReadSecrets)
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

// ReadSecrets reads the daemon's DH-HMAC-CHAP secrets from r (its standard
// input, written by Start): one JSON object, or nothing.
func ReadSecrets(r io.Reader) (secret, ctrlSecret string, err error) {
	var s daemonSecrets
	b, err := io.ReadAll(io.LimitReader(r, 1<<16))
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return "", "", err
	}
	err = json.Unmarshal(b, &s)
	return s.Secret, s.CtrlSecret, err
}
