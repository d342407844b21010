package log

import (
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
	if _, l, err := New(Options{Level: "info", Format: "console"}); err != nil || l.GetSink() == nil {
		t.Fatalf("New console: %v", err)
	}
}

func TestRouteKlogRaisesKlogVerbosity(t *testing.T) {
	_, l, err := New(Options{Level: "6", Format: "json"})
	if err != nil {
		t.Fatal(err)
	}
	if err := RouteKlog(l, "6"); err != nil {
		t.Fatal(err)
	}
	if !klog.V(6).Enabled() || klog.V(7).Enabled() {
		t.Fatalf("klog.V(6) enabled = %v, V(7) = %v; want true, false", klog.V(6).Enabled(), klog.V(7).Enabled())
	}
	if err := RouteKlog(l, "info"); err != nil {
		t.Fatal(err)
	}
	if klog.V(1).Enabled() {
		t.Fatal("klog.V(1) still enabled at info")
	}
}
