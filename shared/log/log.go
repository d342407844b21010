// Package log builds the process logger: zap underneath, logr on top, and klog's global
// output (client-go, leader election, informers) routed into the same sink so every line a
// binary prints shares one format.
package log

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

// Formats and Levels list the accepted values of --log-format and --log-level.
var (
	Formats = []string{"json", "console"}
	Levels  = []string{"debug", "info", "warn", "error"}
)

// Options configure the logger.
type Options struct {
	// Level is one of Levels, or a number n >= 0 meaning logr verbosity V(n) (info is 0,
	// debug is 1; V(4) per-sync timings need 4).
	Level string
	// Format is "json" or "console".
	Format string
}

// ParseLevel turns a --log-level value into a zap level. Numeric verbosities map onto zap's
// negative levels the way zapr expects: V(n) is zap level -n.
func ParseLevel(s string) (zapcore.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return zapcore.DebugLevel, nil
	case "info", "":
		return zapcore.InfoLevel, nil
	case "warn":
		return zapcore.WarnLevel, nil
	case "error":
		return zapcore.ErrorLevel, nil
	}
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err == nil && fmt.Sprint(n) == s && n >= 0 && n <= 10 {
		return zapcore.Level(-n), nil
	}
	return 0, fmt.Errorf("unknown level %q (want one of %s, or a verbosity 0-10)", s, strings.Join(Levels, ", "))
}

// ValidateFormat reports whether s is a known --log-format.
func ValidateFormat(s string) error {
	for _, f := range Formats {
		if s == f {
			return nil
		}
	}
	return fmt.Errorf("unknown format %q (want one of %s)", s, strings.Join(Formats, ", "))
}

// New builds the zap logger and its logr view. The caller owns Sync.
func New(o Options) (*zap.Logger, logr.Logger, error) {
	lvl, err := ParseLevel(o.Level)
	if err != nil {
		return nil, logr.Discard(), err
	}
	if err := ValidateFormat(o.Format); err != nil {
		return nil, logr.Discard(), err
	}
	var cfg zap.Config
	if o.Format == "console" {
		cfg = zap.NewDevelopmentConfig()
		cfg.Development = false
		cfg.EncoderConfig.EncodeLevel = zapcore.CapitalLevelEncoder
	} else {
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "ts"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
		// Controllers log bursts on purpose (a resync of 10k objects at V(4)); sampling would
		// hide exactly the lines an operator raised the level for.
		cfg.Sampling = nil
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.DisableStacktrace = true
	zl, err := cfg.Build()
	if err != nil {
		return nil, logr.Discard(), err
	}
	return zl, zapr.NewLogger(zl), nil
}

// RouteKlog sends klog's global output (and klog.FromContext's fallback) to l, and sets
// klog's own verbosity to match level: legacy klog.V(n) call sites (client-go's request
// logging at V(6) and up) check it before anything reaches l.
func RouteKlog(l logr.Logger, level string) error {
	lvl, err := ParseLevel(level)
	if err != nil {
		return err
	}
	v := 0
	if lvl < 0 {
		v = int(-lvl)
	}
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	if err := fs.Set("v", strconv.Itoa(v)); err != nil {
		return err
	}
	// klog's logger is process-global and read without locks by every goroutine that logs;
	// a binary routes it once. (Tests that run several binaries in one process keep the
	// first logger rather than race on replacing it.)
	routeOnce.Do(func() { klog.SetLoggerWithOptions(l, klog.ContextualLogger(true)) })
	return nil
}

var routeOnce sync.Once
