package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"time"
)

// ctlCall sends req to a controller's daemon and hands each answer line to
// each; it returns the last line.
func ctlCall(dev string, req ctlRequest, timeout time.Duration, each func(ctlResponse)) (ctlResponse, error) {
	var last ctlResponse
	c, err := net.DialTimeout("unix", filepath.Join(instanceDir(dev), "ctl.sock"), 5*time.Second)
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
		var r ctlResponse
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
