package log

import (
	"testing"

	"go.uber.org/zap/zapcore"
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
