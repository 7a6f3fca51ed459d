package daemon

import (
	"os"
	"strconv"

	"github.com/coreos/go-systemd/v22/journal"
	"go.uber.org/zap"
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// logOutput describes where logs go.
type logOutput struct {
	// tty: stderr is a terminal.
	tty bool
	// journal: stderr is connected to systemd-journald ($JOURNAL_STREAM
	// names it), so lines get a syslog priority prefix.
	journal bool
}

// detectLogOutput inspects stderr.
func detectLogOutput() logOutput {
	var o logOutput
	if _, err := unix.IoctlGetTermios(int(os.Stderr.Fd()), unix.TCGETS); err == nil {
		o.tty = true
	}
	if ok, err := journal.StderrIsJournalStream(); err == nil && ok {
		o.journal = true
	}
	return o
}

// encoding resolves a --log-format value: "auto" is console on a terminal
// and JSON otherwise (under systemd, in containers, into files and pipes).
func (o logOutput) encoding(format string) string {
	if format == "auto" {
		if o.tty && !o.journal {
			return "console"
		}
		return "json"
	}
	return format
}

// newLogger builds the daemon's logger writing to w. format is "console"
// or "json" (resolved). Under journald every line starts with a syslog
// priority prefix ("<6>"), which journald strips and records as PRIORITY,
// so `journalctl -p warning` works on JSON lines too.
func newLogger(level zap.AtomicLevel, format string, out logOutput, w zapcore.WriteSyncer) *zap.Logger {
	var enc zapcore.Encoder
	if format == "console" {
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("2006-01-02 15:04:05.000")
		if out.tty {
			ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		ec.StacktraceKey = ""
		enc = zapcore.NewConsoleEncoder(ec)
	} else {
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.RFC3339NanoTimeEncoder
		ec.TimeKey = "ts"
		// Durations as Go duration strings ("30s"), never a bare number.
		ec.EncodeDuration = zapcore.StringDurationEncoder
		enc = zapcore.NewJSONEncoder(ec)
	}
	if out.journal {
		enc = priorityEncoder{enc}
	}
	core := zapcore.NewCore(enc, w, level)
	return zap.New(core, zap.ErrorOutput(w))
}

var bufferPool = buffer.NewPool()

// priorityEncoder prefixes each entry with its sd-daemon(3) priority.
type priorityEncoder struct {
	zapcore.Encoder
}

// Clone keeps the prefix on loggers made With fields.
func (p priorityEncoder) Clone() zapcore.Encoder { return priorityEncoder{p.Encoder.Clone()} }

// EncodeEntry prefixes the encoded entry with "<priority>".
func (p priorityEncoder) EncodeEntry(ent zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	b, err := p.Encoder.EncodeEntry(ent, fields)
	if err != nil {
		return nil, err
	}
	out := bufferPool.Get()
	out.AppendByte('<')
	out.AppendString(strconv.Itoa(syslogPriority(ent.Level)))
	out.AppendByte('>')
	out.AppendBytes(b.Bytes())
	b.Free()
	return out, nil
}

// syslogPriority maps a zap level to a syslog priority (syslog(3)).
func syslogPriority(l zapcore.Level) int {
	switch {
	case l <= zapcore.DebugLevel:
		return 7 // LOG_DEBUG
	case l == zapcore.InfoLevel:
		return 6 // LOG_INFO
	case l == zapcore.WarnLevel:
		return 4 // LOG_WARNING
	case l == zapcore.ErrorLevel:
		return 3 // LOG_ERR
	default:
		return 2 // LOG_CRIT: DPanic, Panic, Fatal
	}
}
