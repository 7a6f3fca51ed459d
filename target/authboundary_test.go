package target

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/nvmetd/nvmetd/nvmeof"
)

// The target's authentication boundary against peers that do not belong
// (issue 22 items 2, 3, 7, 9; issue 23 items 6, 7): each test acts as the
// attacker would, on the wire.

// jsonLog is a goroutine-safe buffer of JSON log lines.
type jsonLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *jsonLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *jsonLog) Sync() error { return nil }

// lines returns the lines whose msg is msg, decoded; a line that is not
// valid JSON fails the test.
func (l *jsonLog) lines(t testing.TB, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	text := l.buf.String()
	l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		if msg == "" || m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// startServerJSON starts a target on cfg that logs JSON (the daemon's
// production encoder keys) into the returned buffer.
func startServerJSON(t testing.TB, cfg *Config) (*server, *jsonLog) {
	t.Helper()
	l := &jsonLog{}
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	log := zap.New(zapcore.NewCore(enc, l, zap.DebugLevel))
	c := cfg.Clone()
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	s := newServer(c, log)
	startAndStop(t, s)
	return s, l
}

// countKey counts the occurrences of "key": in a raw JSON line (a JSON
// decoder keeps only the last of duplicate keys).
func countKey(line, key string) int { return strings.Count(line, `"`+key+`":`) }

// TestConnectRefusedJSONReason: a peer whose Connect is refused gets one
// JSON log line "connect refused" with one "reason" key, and it says why
// (issue 23 item 6: the rate-limited log added its own "reason" key after
// the real one, and JSON parsers keep the last).
func TestConnectRefusedJSONReason(t *testing.T) {
	cfg := testConfig(t, memNS(1, "1MiB"))
	s, l := startServerJSON(t, cfg)
	q := mustDial(t, portAddr(s, 1), 0)
	_, err := connectCmd(t, q, "nqn.2024-01.io.nvmetd.test:nosuch", testHostNQN, nvmeof.CNTLIDDynamic, testKATO)
	wantStatus(t, "Connect to an unknown subsystem", err, nvmeof.StatusConnectInvalidParameters|nvmeof.StatusDNR)
	lines := l.lines(t, "connect refused")
	if len(lines) != 1 {
		t.Fatalf("%d \"connect refused\" lines, want 1", len(lines))
	}
	if r, _ := lines[0]["reason"].(string); !strings.Contains(r, "unknown subsystem") {
		t.Fatalf("reason %q, want the refusal's reason (unknown subsystem)", r)
	}
	l.mu.Lock()
	raw := l.buf.String()
	l.mu.Unlock()
	for _, line := range strings.Split(raw, "\n") {
		if strings.Contains(line, `"connect refused"`) && countKey(line, "reason") != 1 {
			t.Fatalf("the line carries \"reason\" %d times: %s", countKey(line, "reason"), line)
		}
	}
}

// startAndStop starts s and shuts it down when the test ends.
func startAndStop(t testing.TB, s *server) {
	t.Helper()
	if err := s.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hang)
		defer cancel()
		if err := s.shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
}
