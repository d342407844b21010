// Package log builds the process logger: zap underneath, logr on top, and klog's global
// output (client-go, leader election, informers) routed into the same sink so every line a
// binary prints shares one format.
package logging

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
	"k8s.io/klog/v2/textlogger"
)

// Formats and Levels list the accepted values of --logging-format (--log-format) and
// --log-level. "text" and "console" name the same human-readable format: upstream calls it
// text, zap calls it console.
var (
	Formats = []string{"json", "text", "console"}
	Levels  = []string{"debug", "info", "warn", "error"}
)

// MaxVerbosity is the highest verbosity accepted by --v and --vmodule: client-go logs request
// and response bodies at 8 to 10, and nothing logs above.
const MaxVerbosity = 10

// Options configure the logger.
type Options struct {
	// Level is one of Levels, or a number n >= 0 meaning logr verbosity V(n) (info is 0,
	// debug is 1; V(4) per-sync timings need 4).
	Level string
	// VModule raises the verbosity of single source files, in klog's syntax: a comma-separated
	// list of pattern=N, the pattern matching a file name without ".go" (or a path, with a
	// "/"), with * and ? wildcards.
	VModule string
	// Format is one of Formats.
	Format string
}

// ParseVModule checks a --vmodule value with klog's own parser and returns the highest
// verbosity it asks for.
func ParseVModule(s string) (int, error) {
	if err := textlogger.NewConfig().VModule().Set(s); err != nil {
		return 0, err
	}
	highest := 0
	for _, item := range strings.Split(s, ",") {
		_, v, ok := strings.Cut(item, "=")
		if !ok {
			continue // an empty item, which klog skips
		}
		n, _ := strconv.Atoi(v) // klog parsed it already
		if n > MaxVerbosity {
			return 0, fmt.Errorf("%q: verbosity %d is above %d", item, n, MaxVerbosity)
		}
		highest = max(highest, n)
	}
	return highest, nil
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
	if _, err := fmt.Sscanf(s, "%d", &n); err == nil && fmt.Sprint(n) == s && n >= 0 && n <= MaxVerbosity {
		return zapcore.Level(-n), nil
	}
	return 0, fmt.Errorf("unknown level %q (want one of %s, or a verbosity 0-%d)", s, strings.Join(Levels, ", "), MaxVerbosity)
}

// ValidateFormat reports whether s is a known --logging-format.
func ValidateFormat(s string) error {
	for _, f := range Formats {
		if s == f {
			return nil
		}
	}
	return fmt.Errorf("unknown format %q (want one of %s)", s, strings.Join(Formats, ", "))
}

// New builds the zap logger and its logr view. The caller owns Sync. Lines that only
// o.VModule enables are written once RouteKlog has handed o to klog, which decides them.
//
// JSON lines carry the verbosity as upstream's JSON format does: "v": n on every info line
// (0 included) and the error under "err"; "level" stays, "info" for every verbosity, so
// that queries on it keep working. Console lines show V(n) lines as "Vn" in the level column.
func New(o Options) (*zap.Logger, logr.Logger, error) { return newLogger(o, nil) }

// newLogger is New writing to out instead of stderr when out is not nil.
func newLogger(o Options, out zapcore.WriteSyncer) (*zap.Logger, logr.Logger, error) {
	lvl, err := ParseLevel(o.Level)
	if err != nil {
		return nil, logr.Discard(), err
	}
	if err := ValidateFormat(o.Format); err != nil {
		return nil, logr.Discard(), err
	}
	highest, err := ParseVModule(o.VModule)
	if err != nil {
		return nil, logr.Discard(), err
	}
	var cfg zap.Config
	zaprOpts := []zapr.Option{zapr.ErrorKey("err")}
	if o.Format == "json" {
		cfg = zap.NewProductionConfig()
		cfg.EncoderConfig.TimeKey = "ts"
		cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
		cfg.EncoderConfig.EncodeLevel = jsonLevel
		// Controllers log bursts on purpose (a resync of 10k objects at V(4)); sampling would
		// hide exactly the lines an operator raised the level for.
		cfg.Sampling = nil
		zaprOpts = append(zaprOpts, zapr.LogInfoLevel("v"))
	} else {
		cfg = zap.NewDevelopmentConfig()
		cfg.Development = false
		cfg.EncoderConfig.EncodeLevel = consoleLevel
	}
	// The core lets through everything --vmodule may ask for; the sink below narrows V(n)
	// lines above the global verbosity to the files --vmodule names.
	cfg.Level = zap.NewAtomicLevelAt(min(lvl, zapcore.Level(-highest)))
	cfg.DisableStacktrace = true
	var opts []zap.Option
	if out != nil {
		enc := zapcore.NewConsoleEncoder(cfg.EncoderConfig)
		if cfg.Encoding == "json" {
			enc = zapcore.NewJSONEncoder(cfg.EncoderConfig)
		}
		opts = append(opts, zap.WrapCore(func(zapcore.Core) zapcore.Core { return zapcore.NewCore(enc, out, cfg.Level) }))
	}
	zl, err := cfg.Build(opts...)
	if err != nil {
		return nil, logr.Discard(), err
	}
	l := zapr.NewLoggerWithOptions(zl, zaprOpts...)
	if o.VModule != "" {
		l = logr.New(&vmoduleSink{LogSink: l.GetSink(), base: lvl})
	}
	return zl, l, nil
}

// jsonLevel writes the level of a JSON line: zap's name, and "info" for the negative levels
// V(n) lines map to (their verbosity is in the "v" field).
func jsonLevel(l zapcore.Level, enc zapcore.PrimitiveArrayEncoder) {
	if l < zapcore.InfoLevel {
		l = zapcore.InfoLevel
	}
	enc.AppendString(l.String())
}

// consoleLevel writes the level column of a console line: INFO, WARN, ERROR, or Vn for V(n)
// lines, n > 0.
func consoleLevel(l zapcore.Level, enc zapcore.PrimitiveArrayEncoder) {
	if l < zapcore.InfoLevel {
		enc.AppendString("V" + strconv.Itoa(-int(l)))
		return
	}
	enc.AppendString(l.CapitalString())
}

// vmoduleSink enables V(n) lines above the global verbosity only where klog's --vmodule
// does: klog looks at the file of the call site, which is depth frames above Enabled.
type vmoduleSink struct {
	logr.LogSink
	base  zapcore.Level // the level without --vmodule
	depth int
}

var _ logr.CallDepthLogSink = &vmoduleSink{}

// Init records the call depth only: the zapr sink inside was initialised by its own logger
// already, and a second Init would shift its "caller" by another frame.
func (s *vmoduleSink) Init(info logr.RuntimeInfo) { s.depth = info.CallDepth }

func (s *vmoduleSink) Enabled(level int) bool {
	if !s.LogSink.Enabled(level) {
		return false
	}
	if zapcore.Level(-level) >= s.base {
		return true
	}
	// One frame for Enabled itself, then the logr.Logger method, then the caller.
	return level > 0 && klog.VDepth(s.depth+1, klog.Level(level)).Enabled()
}

func (s *vmoduleSink) WithValues(kv ...any) logr.LogSink {
	return &vmoduleSink{LogSink: s.LogSink.WithValues(kv...), base: s.base, depth: s.depth}
}

func (s *vmoduleSink) WithName(name string) logr.LogSink {
	return &vmoduleSink{LogSink: s.LogSink.WithName(name), base: s.base, depth: s.depth}
}

func (s *vmoduleSink) WithCallDepth(n int) logr.LogSink {
	inner := s.LogSink
	if cd, ok := inner.(logr.CallDepthLogSink); ok {
		inner = cd.WithCallDepth(n)
	}
	return &vmoduleSink{LogSink: inner, base: s.base, depth: s.depth + n}
}

// RouteKlog sends klog's global output (and klog.FromContext's fallback) to l, and applies
// o's verbosity and vmodule to klog: legacy klog.V(n) call sites (client-go's request
// logging at V(6) and up) check them before anything reaches l, and l's --vmodule decisions
// are klog's.
func RouteKlog(l logr.Logger, o Options) error {
	lvl, err := ParseLevel(o.Level)
	if err != nil {
		return err
	}
	if _, err := ParseVModule(o.VModule); err != nil {
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
	if err := fs.Set("vmodule", o.VModule); err != nil {
		return err
	}
	// klog's logger is process-global and read without locks by every goroutine that logs;
	// a binary routes it once. (Tests that run several binaries in one process keep the
	// first logger rather than race on replacing it.)
	routeOnce.Do(func() { klog.SetLoggerWithOptions(l, klog.ContextualLogger(true)) })
	return nil
}

var routeOnce sync.Once
