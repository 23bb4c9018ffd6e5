package main

import (
	"io"

	"github.com/mattn/go-isatty"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Log formats (-log-format).
const (
	logConsole = "console" // human-readable lines
	logJSON    = "json"    // one JSON object per line, for cluster log collectors
)

// newLogger builds profile-run's logger on w: the console encoding reads
// like a terminal tool's messages (time, level, message, fields); JSON is
// what log collectors parse. Usage errors are not logged: they stay one
// plain line, the command-line convention.
func newLogger(w io.Writer, format, level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, usagef("-log-level: unknown level %q (one of: debug, info, warn, error)", level)
	}
	var enc zapcore.Encoder
	switch format {
	case logConsole:
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05.000")
		cfg.EncodeLevel = zapcore.CapitalLevelEncoder
		if isTerminal(w) {
			cfg.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		cfg.NameKey, cfg.CallerKey, cfg.StacktraceKey = "", "", ""
		enc = zapcore.NewConsoleEncoder(cfg)
	case logJSON:
		cfg := zap.NewProductionEncoderConfig()
		cfg.EncodeTime = zapcore.ISO8601TimeEncoder
		cfg.CallerKey, cfg.StacktraceKey = "", ""
		enc = zapcore.NewJSONEncoder(cfg)
	default:
		return nil, usagef("-log-format: unknown format %q (one of: console, json)", format)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core).Named("profile-run"), nil
}

// isTerminal reports whether w is a terminal (a file on a tty).
func isTerminal(w io.Writer) bool {
	f := fileOf(w)
	if f == nil {
		return false
	}
	fd := f.Fd()
	return isatty.IsTerminal(fd) || isatty.IsCygwinTerminal(fd)
}
