package servicelb

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/services/servicelb/allocation"
)

// memStore is a Store in memory that counts its writes.
type memStore struct {
	value  []byte
	found  bool
	loaded bool
	saves  int
	fail   error
}

func (m *memStore) Name() string { return "mem" }
func (m *memStore) Load(context.Context) ([]byte, bool, error) {
	if m.fail != nil {
		return nil, false, m.fail
	}
	m.loaded = true
	return m.value, m.found, nil
}
func (m *memStore) Save(_ context.Context, v []byte) error {
	if m.fail != nil {
		return m.fail
	}
	m.value, m.found = v, true
	m.saves++
	return nil
}
func (m *memStore) Loaded() bool { return m.loaded }

func TestOverwriteKeeperWritesOnlyWhatIsInProgress(t *testing.T) {
	ctx := context.Background()
	ours := []v1.LoadBalancerIngress{{IP: "192.0.2.1"}}
	theirs := []v1.LoadBalancerIngress{{Hostname: "lb.example"}}
	now := time.Unix(1000, 0)
	st := allocation.New()
	m := &memStore{}
	k := &overwriteKeeper{state: st, s: m, now: func() time.Time { return now }, log: logr.Discard()}
	if !k.load(ctx) || !k.save(ctx) || m.saves != 0 {
		t.Fatalf("no episode, nothing kept: %d writes", m.saves)
	}
	st.Wrote("ns/a", ours)
	st.OverwriteBackoff("ns/a", "uid-a", theirs, ours, now)
	k.save(ctx)
	k.save(ctx)
	if m.saves != 1 {
		t.Fatalf("an episode begins: %d writes, want 1", m.saves)
	}
	now = now.Add(2 * time.Second)
	st.OverwriteBackoff("ns/a", "uid-a", theirs, ours, now) // waiting: only its sighting moves
	k.save(ctx)
	if m.saves != 1 {
		t.Fatalf("a sighting alone is written at the heartbeat only: %d writes", m.saves)
	}
	now = now.Add(overwritesHeartbeat)
	k.save(ctx)
	if m.saves != 2 {
		t.Fatalf("heartbeat: %d writes, want 2", m.saves)
	}
	var kept allocation.KeptOverwrites
	if err := json.Unmarshal(m.value, &kept); err != nil || len(kept.Episodes) != 1 || kept.Episodes[0].Key != "ns/a" || kept.Episodes[0].Attempts != 1 {
		t.Fatalf("kept %s (%v)", m.value, err)
	}

	// The next holder takes it from the store.
	next := allocation.New()
	k2 := &overwriteKeeper{state: next, s: &memStore{value: m.value, found: true}, now: func() time.Time { return now }, log: logr.Discard()}
	if !k2.load(ctx) || len(next.KeptOverwrites(now).Episodes) != 1 {
		t.Fatal("the next holder did not take the kept episode")
	}

	// The episode ends (quiet): written once empty, then nothing.
	now = now.Add(11 * time.Minute)
	k.save(ctx)
	k.save(ctx)
	now = now.Add(overwritesHeartbeat)
	k.save(ctx)
	if m.saves != 3 {
		t.Fatalf("episode over: %d writes, want 3", m.saves)
	}

	// Unreadable or unparsable: nothing taken; a failed write is retried.
	for name, s := range map[string]*memStore{"unreadable": {fail: errors.New("forbidden")}, "unparsable": {value: []byte("{"), found: true}} {
		st := allocation.New()
		k := &overwriteKeeper{state: st, s: s, now: func() time.Time { return now }, log: logr.Discard()}
		k.load(ctx)
		if len(st.KeptOverwrites(now).Episodes) != 0 {
			t.Errorf("%s: episodes taken", name)
		}
	}
	failing := &memStore{fail: errors.New("fenced")}
	k3 := &overwriteKeeper{state: st, s: failing, now: func() time.Time { return now }, log: logr.Discard()}
	st.OverwriteBackoff("ns/a", "uid-a", theirs, ours, now)
	if k3.save(ctx) {
		t.Fatal("a failed write reported as done")
	}
}
