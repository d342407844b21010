package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
)

func TestParseLevel(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    zapcore.Level
		wantErr bool
	}{
		{"info", zapcore.InfoLevel, false},
		{"debug", zapcore.DebugLevel, false},
		{"ERROR", zapcore.ErrorLevel, false},
		{"4", zapcore.Level(-4), false},
		{"0", zapcore.InfoLevel, false},
		{"verbose", 0, true},
		{"-1", 0, true},
		{"11", 0, true},
		{"4x", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseLevel(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseLevel(%q) err = %v, wantErr %v", tc.in, err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Fatalf("ParseLevel(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestNewRejectsUnknownFormat(t *testing.T) {
	if _, _, err := New(Options{Level: "info", Format: "xml"}); err == nil {
		t.Fatal("New accepted format xml")
	}
	for _, f := range []string{"console", "text", "json"} {
		if _, l, err := New(Options{Level: "info", Format: f}); err != nil || l.GetSink() == nil {
			t.Fatalf("New %s: %v", f, err)
		}
	}
}

func TestParseVModule(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"", 0, false},
		{"foo=3", 3, false},
		{"foo=3,bar*=5,", 5, false},
		{"pkg/sub/file=2", 2, false},
		{"foo=0", 0, false},
		{"foo", 0, true},
		{"=3", 0, true},
		{"foo=", 0, true},
		{"foo=x", 0, true},
		{"foo=-1", 0, true},
		{"foo=1=2", 0, true},
		{"foo=11", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseVModule(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseVModule(%q) err = %v, wantErr %v", tc.in, err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Fatalf("ParseVModule(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

// JSON lines carry verbosity as upstream's JSON format does: "v" on info lines, "err" for the
// error, and never zap's "Level(-n)".
func TestJSONVerbosity(t *testing.T) {
	var buf bytes.Buffer
	_, l, err := newLogger(Options{Level: "4", Format: "json"}, zapcore.AddSync(&buf))
	if err != nil {
		t.Fatal(err)
	}
	l.V(4).Info("synced", "key", "ns/a")
	l.Info("started")
	l.V(5).Info("hidden")
	l.Error(errors.New("boom"), "failed")
	if strings.Contains(buf.String(), "Level(") {
		t.Errorf("output names a zap level:\n%s", buf.String())
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got:\n%s", buf.String())
	}
	for i, want := range []map[string]any{
		{"msg": "synced", "v": 4.0, "level": "info", "key": "ns/a"},
		{"msg": "started", "v": 0.0, "level": "info"},
		{"msg": "failed", "level": "error", "err": "boom", "v": nil},
	} {
		var got map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &got); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, lines[i])
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %v: %s", i, k, got[k], v, lines[i])
			}
		}
	}
}

func TestConsoleVerbosity(t *testing.T) {
	var buf bytes.Buffer
	_, l, err := newLogger(Options{Level: "4", Format: "text"}, zapcore.AddSync(&buf))
	if err != nil {
		t.Fatal(err)
	}
	l.V(4).Info("synced")
	l.Info("started")
	out := buf.String()
	if !strings.Contains(out, "\tV4\t") || !strings.Contains(out, "\tINFO\t") || strings.Contains(out, "LEVEL(") {
		t.Errorf("console output:\n%s", out)
	}
}

// klog lines routed into zap show their verbosity the same way.
func TestKlogLinesShowVerbosity(t *testing.T) {
	var buf bytes.Buffer
	o := Options{Level: "4", Format: "json"}
	_, l, err := newLogger(o, zapcore.AddSync(&buf))
	if err != nil {
		t.Fatal(err)
	}
	// RouteKlog routes klog once per process, maybe to another test's logger: set this one.
	if err := RouteKlog(l, o); err != nil {
		t.Fatal(err)
	}
	klog.SetLogger(l)
	defer klog.ClearLogger()
	klog.V(3).InfoS("from klog", "n", 1)
	if !strings.Contains(buf.String(), `"v":3`) || strings.Contains(buf.String(), "Level(") {
		t.Errorf("klog line: %s", buf.String())
	}
}

// --vmodule raises the verbosity of the files it names, for logr and klog call sites alike,
// and of no others.
func TestVModule(t *testing.T) {
	var buf bytes.Buffer
	o := Options{Level: "1", VModule: "logging_test=3", Format: "json"}
	_, l, err := newLogger(o, zapcore.AddSync(&buf))
	if err != nil {
		t.Fatal(err)
	}
	if err := RouteKlog(l, o); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := RouteKlog(l, Options{Level: "info"}); err != nil {
			t.Fatal(err)
		}
	}()
	if !l.V(1).Enabled() || !l.V(3).Enabled() || l.V(4).Enabled() {
		t.Errorf("in logging_test.go: V(1) %v, V(3) %v, V(4) %v; want true, true, false", l.V(1).Enabled(), l.V(3).Enabled(), l.V(4).Enabled())
	}
	if !klog.V(3).Enabled() || klog.V(4).Enabled() {
		t.Errorf("klog in logging_test.go: V(3) %v, V(4) %v; want true, false", klog.V(3).Enabled(), klog.V(4).Enabled())
	}
	l.V(3).Info("vmodule line")
	if !strings.Contains(buf.String(), `"msg":"vmodule line"`) {
		t.Errorf("V(3) line not written: %q", buf.String())
	}
	if !strings.Contains(buf.String(), `"caller":"logging/logging_test.go:`) {
		t.Errorf("V(3) line does not name its caller: %q", buf.String())
	}
	// A klog line passes klog's check and then the sink's, which must find the same file.
	klog.SetLogger(l)
	defer klog.ClearLogger()
	klog.V(3).InfoS("klog vmodule line")
	if !strings.Contains(buf.String(), `"msg":"klog vmodule line"`) {
		t.Errorf("klog V(3) line not written: %q", buf.String())
	}
	if strings.Count(buf.String(), `"caller":"logging/logging_test.go:`) != 2 {
		t.Errorf("the klog line does not name its caller: %q", buf.String())
	}
	// Another file: the global verbosity only.
	if otherFileEnabled(l, 2) {
		t.Error("V(2) enabled in log.go, which --vmodule does not name")
	}
	if !otherFileEnabled(l, 1) {
		t.Error("V(1) disabled in log.go at --v=1")
	}
}

func TestRouteKlogRaisesKlogVerbosity(t *testing.T) {
	_, l, err := New(Options{Level: "6", Format: "json"})
	if err != nil {
		t.Fatal(err)
	}
	if err := RouteKlog(l, Options{Level: "6"}); err != nil {
		t.Fatal(err)
	}
	if !klog.V(6).Enabled() || klog.V(7).Enabled() {
		t.Fatalf("klog.V(6) enabled = %v, V(7) = %v; want true, false", klog.V(6).Enabled(), klog.V(7).Enabled())
	}
	if err := RouteKlog(l, Options{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	if klog.V(1).Enabled() {
		t.Fatal("klog.V(1) still enabled at info")
	}
}
