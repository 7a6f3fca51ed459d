package auth

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// The tests here run the state machines against testdata/linuxref.py, an
// independent Python port of the Linux host (nvme_queue_auth_work) and of
// nvmet's Authentication Send/Receive handling, over JSON lines. The lab VM
// has no kernel with CONFIG_NVME_AUTH yet; this is the stand-in.

type pyPeer struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// startPeer starts the reference peer for a whole test: one process serves
// the sessions of its subtests, which run one after the other.
func startPeer(t *testing.T, mode string) *pyPeer {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: cannot run the Linux reference peer testdata/linuxref.py")
	}
	cmd := exec.Command(py, filepath.Join("testdata", "linuxref.py"), mode)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pyPeer{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	p.out.Buffer(make([]byte, 1<<20), 1<<20)
	t.Cleanup(func() {
		in.Close()
		cmd.Wait()
	})
	return p
}

func (p *pyPeer) write(v any) {
	b, _ := json.Marshal(v)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatal(err)
	}
}

func (p *pyPeer) read() map[string]any {
	if !p.out.Scan() {
		p.t.Fatalf("reference peer ended: %v", p.out.Err())
	}
	var m map[string]any
	if err := json.Unmarshal(p.out.Bytes(), &m); err != nil {
		p.t.Fatalf("%s: %v", p.out.Bytes(), err)
	}
	return m
}

func hexField(t *testing.T, m map[string]any, k string) []byte {
	s, _ := m[k].(string)
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runLinuxHost runs the Python Linux host against our controller and
// returns the host's error text ("" on success).
func runLinuxHost(t *testing.T, p *pyPeer, c *Controller, hostKey, ctrlKey *Secret, seed int) (string, bool) {
	cfg := map[string]any{"hostnqn": testHostNQN, "subnqn": testSubNQN, "hostkey": hostKey.Encode(), "tid": 77, "seed": seed}
	if ctrlKey != nil {
		cfg["ctrlkey"] = ctrlKey.Encode()
	}
	p.t = t
	p.write(cfg)
	fatal := false
	for i := 0; ; i++ {
		if i > 10 {
			t.Fatal("Linux host does not finish")
		}
		m := p.read()
		switch m["op"] {
		case "send":
			data := hexField(t, m, "data")
			r := c.Send(sqe(true, uint32(len(data))), data)
			fatal = fatal || r.Fatal
			p.write(map[string]any{"status": int(r.Status)})
		case "recv":
			al := uint32(m["al"].(float64))
			r := c.Receive(sqe(false, al), al)
			fatal = fatal || r.Fatal
			buf := make([]byte, al)
			copy(buf, r.Data)
			p.write(map[string]any{"status": int(r.Status), "data": hex.EncodeToString(buf)})
		case "done":
			return m["error"].(string), fatal
		default:
			t.Fatalf("peer says %v", m)
		}
	}
}

// runLinuxCtrl runs our host against the Python nvmet and returns the
// host's error and the peer's final state.
func runLinuxCtrl(t *testing.T, p *pyPeer, h *Host, cfg map[string]any) (error, bool) {
	p.t = t
	p.write(cfg)
	step := h.Start(99)
	for i := 0; step.Action != HostDone; i++ {
		if i > 10 {
			t.Fatal("transaction does not end")
		}
		if step.Action == HostSend {
			p.write(map[string]any{"op": "send", "data": hex.EncodeToString(step.Data)})
			m := p.read()
			step = h.Complete(nvmeof.Status(m["status"].(float64)), nil)
		} else {
			p.write(map[string]any{"op": "recv", "al": step.AllocLen})
			m := p.read()
			data := make([]byte, step.AllocLen)
			copy(data, hexField(t, m, "data"))
			step = h.Complete(nvmeof.Status(m["status"].(float64)), data)
		}
	}
	p.write(map[string]any{"op": "state"})
	auth := p.read()["authenticated"].(bool)
	p.write(map[string]any{"op": "end"})
	return step.Err, auth
}

// TestLinuxHostInterop: the Linux host (Python reference) authenticates to
// our controller, every hash × DH group, unidirectional and bidirectional.
func TestLinuxHostInterop(t *testing.T) {
	p := startPeer(t, "host")
	for _, hash := range AllHashes {
		for _, group := range AllDHGroups {
			for _, bidi := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/%v/bidi=%v", hash, group, bidi), func(t *testing.T) {
					c := mustController(t, ControllerConfig{SubNQN: testSubNQN, HostNQN: testHostNQN, HostSecret: hostSecret,
						CtrlSecret: ctrlSecret, Hash: hash, DHGroup: group, Rand: detReader(t.Name())})
					var ck *Secret
					if bidi {
						ck = ctrlSecret
					}
					if e, fatal := runLinuxHost(t, p, c, hostSecret, ck, int(hash)*10+int(group)); e != "" || fatal || !c.Authenticated() {
						t.Fatalf("Linux host: %q, fatal %v, authenticated %v", e, fatal, c.Authenticated())
					}
					if h, g := c.Negotiated(); h != hash || g != group {
						t.Errorf("negotiated %v %v", h, g)
					}
				})
			}
		}
	}
	t.Run("wrong host key", func(t *testing.T) {
		c := mustController(t, ControllerConfig{SubNQN: testSubNQN, HostNQN: testHostNQN, HostSecret: hostSecret, DHGroup: FFDHE2048, Rand: detReader("w")})
		e, fatal := runLinuxHost(t, p, c, testSecret("wrong", HashSHA384, 48), nil, 1)
		if e != "failure1 1" || !fatal || c.Authenticated() {
			t.Fatalf("Linux host with a wrong key: %q fatal %v", e, fatal)
		}
	})
	t.Run("wrong controller key", func(t *testing.T) {
		c := mustController(t, ControllerConfig{SubNQN: testSubNQN, HostNQN: testHostNQN, HostSecret: hostSecret, CtrlSecret: ctrlSecret, Rand: detReader("w")})
		e, fatal := runLinuxHost(t, p, c, hostSecret, testSecret("wrong", HashNone, 48), 1)
		if e != "controller authentication failed" || !fatal || c.Authenticated() {
			t.Fatalf("Linux host with a wrong controller key: %q fatal %v", e, fatal)
		}
	})
}

// TestLinuxCtrlInterop: our host authenticates to nvmet (Python reference),
// every hash × DH group, unidirectional and bidirectional.
func TestLinuxCtrlInterop(t *testing.T) {
	p := startPeer(t, "ctrl")
	for _, hash := range AllHashes {
		for _, group := range AllDHGroups {
			for _, bidi := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/%v/bidi=%v", hash, group, bidi), func(t *testing.T) {
					hc := HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: hostSecret, Rand: detReader(t.Name())}
					if bidi {
						hc.CtrlSecret = ctrlSecret
					}
					h, err := NewHost(hc)
					if err != nil {
						t.Fatal(err)
					}
					cfg := map[string]any{"hostnqn": testHostNQN, "subnqn": testSubNQN, "hostkey": hostSecret.Encode(),
						"ctrlkey": ctrlSecret.Encode(), "hash": int(hash), "dhgroup": int(group), "seed": int(hash)*10 + int(group)}
					if err, auth := runLinuxCtrl(t, p, h, cfg); err != nil || !auth {
						t.Fatalf("host: %v, nvmet authenticated %v", err, auth)
					}
				})
			}
		}
	}
	t.Run("wrong host key", func(t *testing.T) {
		h, _ := NewHost(HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: testSecret("wrong", HashNone, 64), Rand: detReader("w")})
		cfg := map[string]any{"hostnqn": testHostNQN, "subnqn": testSubNQN, "hostkey": hostSecret.Encode(), "hash": 1, "dhgroup": 2, "seed": 3}
		err, auth := runLinuxCtrl(t, p, h, cfg)
		checkFailure(t, &outcome{hostErr: err, ctrlAuth: auth, fatal: true}, ExplFailed, true)
	})
	t.Run("wrong controller key", func(t *testing.T) {
		h, _ := NewHost(HostConfig{HostNQN: testHostNQN, SubNQN: testSubNQN, Secret: hostSecret, CtrlSecret: testSecret("wrong", HashNone, 32), Rand: detReader("w")})
		cfg := map[string]any{"hostnqn": testHostNQN, "subnqn": testSubNQN, "hostkey": hostSecret.Encode(), "ctrlkey": ctrlSecret.Encode(),
			"hash": 3, "dhgroup": 1, "seed": 3}
		err, auth := runLinuxCtrl(t, p, h, cfg)
		checkFailure(t, &outcome{hostErr: err, ctrlAuth: auth, fatal: true}, ExplFailed, false)
	})
}
