package daemon

import (
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestLogEncoding(t *testing.T) {
	tests := []struct {
		out    logOutput
		format string
		want   string
	}{
		{logOutput{tty: true}, "auto", "console"},
		{logOutput{}, "auto", "json"},
		{logOutput{journal: true}, "auto", "json"},
		{logOutput{tty: true, journal: true}, "auto", "json"},
		{logOutput{}, "console", "console"},
		{logOutput{tty: true}, "json", "json"},
	}
	for _, tt := range tests {
		if got := tt.out.encoding(tt.format); got != tt.want {
			t.Errorf("%+v %s: %s, want %s", tt.out, tt.format, got, tt.want)
		}
	}
}

func TestLoggerOutput(t *testing.T) {
	tests := []struct {
		name   string
		format string
		out    logOutput
		check  func(t *testing.T, lines []string)
	}{
		{"json", "json", logOutput{}, func(t *testing.T, lines []string) {
			var m map[string]any
			if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
				t.Fatalf("%q: %v", lines[0], err)
			}
			if m["level"] != "info" || m["msg"] != "hello" || m["cntlid"] != float64(7) || m["ts"] == nil {
				t.Errorf("%v", m)
			}
		}},
		{"journal", "json", logOutput{journal: true}, func(t *testing.T, lines []string) {
			for i, p := range []string{"<6>{", "<4>{", "<3>{"} {
				if !strings.HasPrefix(lines[i], p) {
					t.Errorf("line %d %q lacks the priority prefix %s", i, lines[i], p)
				}
			}
			if strings.Contains(lines[0], "debug") {
				t.Error("debug logged at info level")
			}
		}},
		{"console", "console", logOutput{}, func(t *testing.T, lines []string) {
			if !strings.Contains(lines[0], "INFO\thello\t{\"cntlid\": 7}") {
				t.Errorf("%q", lines[0])
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf syncBuffer
			level := zap.NewAtomicLevelAt(zapcore.InfoLevel)
			log := newLogger(level, tt.format, tt.out, zapcore.AddSync(&buf))
			log.Debug("hidden")
			log.With(zap.Int("cntlid", 7)).Info("hello")
			log.Warn("careful")
			log.Error("broken")
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != 3 {
				t.Fatalf("%d lines: %q", len(lines), lines)
			}
			tt.check(t, lines)
		})
	}
}

func TestSyslogPriority(t *testing.T) {
	for l, want := range map[zapcore.Level]int{zapcore.DebugLevel: 7, zapcore.InfoLevel: 6, zapcore.WarnLevel: 4,
		zapcore.ErrorLevel: 3, zapcore.DPanicLevel: 2, zapcore.FatalLevel: 2} {
		if got := syslogPriority(l); got != want {
			t.Errorf("%s: %d, want %d", l, got, want)
		}
	}
}
