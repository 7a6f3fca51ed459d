package connd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/nvmetd/nvmetd/initiator/bench"
	"github.com/nvmetd/nvmetd/initiator/hoststate"
)

// Request is a request on the control socket (one JSON line).
type Request struct {
	Op    string        `json:"op"` // "status", "disconnect", "bench", "add-path"
	Force bool          `json:"force,omitempty"`
	Bench *bench.Params `json:"bench,omitempty"`
	// Path is the connect options of add-path.
	Path *Options `json:"path,omitempty"`
}

// Response is one JSON line of an answer; bench sends progress lines
// before the last one.
type Response struct {
	OK       bool                  `json:"ok"`
	Error    string                `json:"error,omitempty"`
	State    *hoststate.Controller `json:"state,omitempty"`
	Progress string                `json:"progress,omitempty"`
	Result   *bench.Result         `json:"result,omitempty"`
}

// Call sends req to the daemon of controller dev (of store s) and hands
// each answer line to each; it returns the last line.
func Call(s hoststate.Store, dev string, req Request, timeout time.Duration, each func(Response)) (Response, error) {
	var last Response
	c, err := net.DialTimeout("unix", filepath.Join(s.InstanceDir(dev), "ctl.sock"), 5*time.Second)
	if err != nil {
		return last, fmt.Errorf("%s: daemon not reachable: %w", dev, err)
	}
	defer c.Close()
	if timeout > 0 {
		_ = c.SetDeadline(time.Now().Add(timeout))
	}
	b, _ := json.Marshal(req)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return last, err
	}
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	got := false
	for sc.Scan() {
		var r Response
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return last, fmt.Errorf("%s: bad answer: %w", dev, err)
		}
		if each != nil {
			each(r)
		}
		last, got = r, true
	}
	if err := sc.Err(); err != nil {
		return last, fmt.Errorf("%s: %w", dev, err)
	}
	if !got {
		return last, fmt.Errorf("%s: no answer from the daemon", dev)
	}
	return last, nil
}

// LiveState is controller dev's state (of s) for list: it asks the daemon; if it does not answer, the state file says
// what was last known and the state becomes "unreachable".
func LiveState(s hoststate.Store, dev string) *hoststate.Controller {
	if r, err := Call(s, dev, Request{Op: "status"}, 5*time.Second, nil); err == nil && r.State != nil {
		return r.State
	}
	st, err := s.Read(dev)
	if err != nil {
		return nil
	}
	if hoststate.ProcessAlive(st.PID) {
		st.State = "unreachable"
	} else {
		st.State = "dead"
	}
	return st
}
