package main

import (
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// pause waits until told to stop and then exits 0, for SIGTERM (the kubelet stopping the
// sandbox) and SIGINT alike.
func TestPauseStopsOnSignal(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("pause is built for linux")
	}
	bin := buildPause(t, t.TempDir(), runtime.GOARCH)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(bin)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			t.Fatalf("pause exited by itself: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: pause exited with %v, want 0", sig, err)
			}
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("%s: pause still running after 5s", sig)
		}
	}
}
