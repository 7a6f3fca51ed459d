package vblock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// state is a stopped workload's record in JSON: what a sweep by another
// process needs (the Linux host's writer saves it when it stops; its
// sweep, or a later one, loads it).
type state struct {
	Version   int      `json:"version"`
	Run       uint64   `json:"run"`
	Config    Config   `json:"config"`
	Acked     []uint64 `json:"acked"`
	Submitted []uint64 `json:"submitted"`
	Stats     Stats    `json:"stats"`
	Errors    []string `json:"errors,omitempty"`
}

const stateVersion = 1

// SaveState stops the workload (waiting for its I/O in flight) and writes
// what it recorded (its run, shape, the last acknowledged and the highest
// submitted sequence of every block, its counters) to out, for LoadState.
func (w *Workload) SaveState(out io.Writer) error {
	w.Stop()
	st := w.Stats()
	s := state{Version: stateVersion, Run: w.run, Config: w.cfg, Acked: w.acked, Submitted: w.submitted, Stats: st}
	for _, e := range st.Errors {
		s.Errors = append(s.Errors, e.Error())
	}
	if err := json.NewEncoder(out).Encode(&s); err != nil {
		return fmt.Errorf("verify: save state: %w", err)
	}
	return nil
}

// LoadState reads a state SaveState wrote and returns it as a stopped
// Workload, for Sweep.
func LoadState(in io.Reader) (*Workload, error) {
	var s state
	if err := json.NewDecoder(in).Decode(&s); err != nil {
		return nil, fmt.Errorf("verify: load state: %w", err)
	}
	if s.Version != stateVersion {
		return nil, fmt.Errorf("verify: load state: version %d, want %d", s.Version, stateVersion)
	}
	if s.Config.BlockSize < MinBlockSize || s.Config.Blocks <= 0 || int64(len(s.Acked)) != s.Config.Blocks || len(s.Submitted) != len(s.Acked) {
		return nil, fmt.Errorf("verify: load state: block size %d, %d blocks, %d and %d recorded", s.Config.BlockSize, s.Config.Blocks, len(s.Acked), len(s.Submitted))
	}
	w := &Workload{cfg: s.Config, run: s.Run, acked: s.Acked, submitted: s.Submitted, stop: make(chan struct{})}
	w.writes.Store(s.Stats.Writes)
	w.reads.Store(s.Stats.Reads)
	w.writeErrs.Store(s.Stats.WriteErrors)
	w.readErrs.Store(s.Stats.ReadErrors)
	w.readBackErrs.Store(s.Stats.ReadBackErrors)
	for _, e := range s.Errors {
		w.errs = append(w.errs, errors.New(e))
	}
	return w, nil
}

// Gap is a time in which no I/O of the workload completed (through any
// path): a stall as the application saw it.
type Gap struct {
	// Start is the completion before the gap, End the one after it.
	Start, End time.Time
	// From and To are their paths.
	From, To string
}

// Duration is the gap's length.
func (g Gap) Duration() time.Duration { return g.End.Sub(g.Start) }

// Gaps returns, in time order, the times longer than min between two
// successive completions of a PathDevice's I/O (nil for another Device).
func (w *Workload) Gaps(min time.Duration) []Gap {
	l := &w.paths
	l.mu.Lock()
	defer l.mu.Unlock()
	var gs []Gap
	for j := 1; j < len(l.log); j++ {
		a, b := l.log[j-1], l.log[j]
		if time.Duration(b.at-a.at) > min {
			gs = append(gs, Gap{Start: time.Unix(0, a.at), End: time.Unix(0, b.at), From: l.names[a.path], To: l.names[b.path]})
		}
	}
	return gs
}

// Summary is a Report in a form that crosses a process boundary (JSON):
// the Linux host's writer prints it, the test reads it.
type Summary struct {
	Report
	// Err is Report.Err's text ("" if nil); SweepErr is SweepErr's.
	Err, SweepErr string `json:",omitempty"`
	// Errors are the first errors of the workload's I/O.
	Errors []string `json:",omitempty"`
	// Text is Report.String.
	Text string
	// Gaps are the workload's stalls (Workload.Gaps).
	Gaps []Gap `json:",omitempty"`
}

// Summary returns r as a Summary, with gaps.
func (r *Report) Summary(gaps []Gap) Summary {
	s := Summary{Report: *r, Text: r.String(), Gaps: gaps}
	if err := r.Err(); err != nil {
		s.Err = err.Error()
	}
	if err := r.SweepErr(); err != nil {
		s.SweepErr = err.Error()
	}
	for _, e := range r.Workload.Errors {
		s.Errors = append(s.Errors, e.Error())
	}
	return s
}
