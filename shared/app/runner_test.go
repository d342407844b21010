package app

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The controllers of a made-up binary: two on by default, one only when named.
var testControllers = []ControllerName{
	{Name: "endpoints-controller", Aliases: []string{"endpoint"}},
	{Name: "endpointslice-controller", Aliases: []string{"endpointslice"}},
	{Name: "bootstrap-signer-controller", Aliases: []string{"bootstrapsigner"}, DisabledByDefault: true},
}

func TestEnabledControllers(t *testing.T) {
	set := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	const ep, es, bs = "endpoints-controller", "endpointslice-controller", "bootstrap-signer-controller"
	for _, tc := range []struct {
		value   string
		want    map[string]bool
		wantErr string // in the error, besides the flag's name
	}{
		{value: "*", want: set(ep, es)},
		{value: "*,bootstrap-signer-controller", want: set(ep, es, bs)},
		{value: "bootstrapsigner", want: set(bs)}, // an alias
		{value: "*,-endpointslice", want: set(ep)},
		{value: "-endpoint,*", want: set(es)},
		{value: " endpoint , endpointslice ", want: set(ep, es)},
		// The first entry naming a controller decides, as in kube-controller-manager.
		{value: "endpoints-controller,-endpoints-controller", want: set(ep)},
		{value: "-endpoints-controller,endpoints-controller,*", want: set(es)},
		// A controller of kube-controller-manager this binary does not run is refused.
		{value: "*,-garbage-collector-controller", wantErr: `unknown controllers "garbage-collector-controller"`},
		{value: "*,foo,-bar", wantErr: `unknown controllers "foo", "bar"`},
		{value: "-endpoint,-endpointslice", wantErr: "enables none"},
		{value: "", wantErr: "enables none"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			got, err := EnabledControllers("controllers", tc.value, testControllers)
			if tc.wantErr != "" {
				var fe *FlagError
				if !errors.As(err, &fe) || fe.Flag != "controllers" || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("EnabledControllers(%q) = %v, %v; want a FlagError for --controllers with %q", tc.value, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Fatalf("EnabledControllers(%q) = %v, %v; want %v", tc.value, got, err, tc.want)
			}
		})
	}
}

// A failing controller stops the others; the term's error names every failure's controller.
func TestRunControllersFirstFailureStopsTheRest(t *testing.T) {
	rt := &Runtime{}
	boom := errors.New("boom")
	var stopped atomic.Bool
	err := rt.RunControllers(context.Background(), []Controller{
		{Name: "a", HasSynced: func() bool { return true }, Run: func(ctx context.Context) error {
			<-ctx.Done()
			stopped.Store(true)
			return nil
		}},
		{Name: "b", HasSynced: func() bool { return true }, Run: func(context.Context) error { return boom }},
	})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "b: ") {
		t.Fatalf("RunControllers = %v; want b's error, named for b", err)
	}
	if !stopped.Load() {
		t.Fatal("controller a was still running when RunControllers returned")
	}
}

// Every failure is kept, not only the first.
func TestRunControllersJoinsFailures(t *testing.T) {
	rt := &Runtime{}
	errA, errB := errors.New("a failed"), errors.New("b failed")
	err := rt.RunControllers(context.Background(), []Controller{
		{Name: "a", HasSynced: func() bool { return true }, Run: func(ctx context.Context) error { return errA }},
		{Name: "b", HasSynced: func() bool { return true }, Run: func(ctx context.Context) error {
			<-ctx.Done()
			return errB
		}},
	})
	if !errors.Is(err, errA) || !errors.Is(err, errB) {
		t.Fatalf("RunControllers = %v; want both failures", err)
	}
}

// /readyz's check (the function RunControllers registers) is true only once every controller
// has synced; ending ctx ends the term without error.
func TestRunControllersSyncedWaitsForEvery(t *testing.T) {
	rt := &Runtime{}
	var aSynced, bSynced atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	running := make(chan struct{}, 2)
	run := func(ctx context.Context) error {
		running <- struct{}{}
		<-ctx.Done()
		return nil
	}
	go func() {
		done <- rt.RunControllers(ctx, []Controller{
			{Name: "a", HasSynced: aSynced.Load, Run: run},
			{Name: "b", HasSynced: bSynced.Load, Run: run},
		})
	}()
	<-running
	<-running
	synced := func() bool { return (*rt.synced.Load())() }
	if synced() {
		t.Fatal("synced before any controller synced")
	}
	aSynced.Store(true)
	if synced() {
		t.Fatal("synced with b not synced")
	}
	bSynced.Store(true)
	if !synced() {
		t.Fatal("not synced with every controller synced")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunControllers = %v after ctx ended; want nil", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("RunControllers did not return after ctx ended")
	}
}
