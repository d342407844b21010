package pvbinder

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	storagehelpers "k8s.io/component-helpers/storage/volume"
)

const oldClaimUID = types.UID("uid-old-data")

// releasedFor is a volume its claim "data" (UID oldClaimUID) left Released, opted in to
// rebinding, with the Retain policy.
func releasedFor(name, size string, opts ...pvOpt) *v1.PersistentVolume {
	return makePV(name, size, append([]pvOpt{
		pvRef("data", oldClaimUID), pvPhase(v1.VolumeReleased),
		pvAnn(storagehelpers.AnnBoundByController, "yes"), pvAnn(AnnRebindOnRecreate, "true"),
	}, opts...)...)
}

func rebindOptions() Options {
	o := DefaultOptions()
	o.RebindOnRecreate = true
	return o
}

func reasons(events []string, reason string) []string {
	var out []string
	for _, e := range events {
		if strings.Contains(e, " "+reason+" ") {
			out = append(out, e)
		}
	}
	return out
}

func TestRebindRecreatedClaim(t *testing.T) {
	api := newAPIServer(releasedFor("old", "1Gi"), makePV("spare", "1Gi"), makeClaim("data", "1Gi"))
	f := newFixtureWith(t, api, rebindOptions())
	if err := f.syncClaim("data"); err != nil {
		t.Fatal(err)
	}
	assertBound(t, api, "data", "old", true)
	evs := reasons(f.events(), ReasonVolumeRebound)
	if len(evs) != 2 {
		t.Fatalf("VolumeRebound events %q, want one on the volume and one on the claim", evs)
	}
	for _, e := range evs {
		if !strings.Contains(e, string(oldClaimUID)) || !strings.Contains(e, string(claimUID("data"))) {
			t.Errorf("event %q does not name both claim UIDs", e)
		}
	}
	f.settle()
	if evs := reasons(f.events(), ReasonVolumeRebound); len(evs) != 0 {
		t.Errorf("more VolumeRebound events after the bind: %q", evs)
	}
	if pv := api.pv(t, "spare"); pv.Spec.ClaimRef != nil {
		t.Errorf("spare claimed: %+v", pv.Spec.ClaimRef)
	}
}

// TestRebindRefused: whatever does not qualify is left as upstream leaves it (the claim takes
// the spare volume, the previous one keeps its old claimRef).
func TestRebindRefused(t *testing.T) {
	tests := []struct {
		name     string
		pv       *v1.PersistentVolume
		claim    *v1.PersistentVolumeClaim
		opts     Options
		wantTold bool
	}{
		{"flag off", releasedFor("old", "1Gi"), makeClaim("data", "1Gi"), DefaultOptions(), false},
		{"not opted in", releasedFor("old", "1Gi", pvAnn(AnnRebindOnRecreate, "yes")), makeClaim("data", "1Gi"), rebindOptions(), false},
		{"Delete policy", releasedFor("old", "1Gi", pvPolicy(v1.PersistentVolumeReclaimDelete)), makeClaim("data", "1Gi"), rebindOptions(), false},
		{"too small", releasedFor("old", "1Gi"), makeClaim("data", "2Gi"), rebindOptions(), true},
		{"other class", releasedFor("old", "1Gi", pvClass("fast")), makeClaim("data", "1Gi"), rebindOptions(), true},
		{"other volume mode", releasedFor("old", "1Gi", pvBlock()), makeClaim("data", "1Gi"), rebindOptions(), true},
		{"other access modes", releasedFor("old", "1Gi"), makeClaim("data", "1Gi", claimModes(v1.ReadWriteMany)), rebindOptions(), true},
		{"selector", releasedFor("old", "1Gi"), makeClaim("data", "1Gi", claimSelector(map[string]string{"tier": "gold"})), rebindOptions(), true},
		{"data source", releasedFor("old", "1Gi"), makeClaim("data", "1Gi", func(c *v1.PersistentVolumeClaim) {
			c.Spec.DataSource = &v1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "src"}
		}), rebindOptions(), true},
		{"other name", makePV("old", "1Gi", pvRef("other", oldClaimUID), pvPhase(v1.VolumeReleased), pvAnn(AnnRebindOnRecreate, "true")), makeClaim("data", "1Gi"), rebindOptions(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The spare fits every claim above but the access-mode and volume-mode ones.
			spare := makePV("spare", "2Gi", pvModes(v1.ReadWriteOnce, v1.ReadWriteMany), pvLabels(map[string]string{"tier": "gold"}))
			api := newAPIServer(tt.pv, spare, tt.claim)
			f := newFixtureWith(t, api, tt.opts)
			f.settle()
			if pv := api.pv(t, "old"); pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != tt.pv.Spec.ClaimRef.UID {
				t.Errorf("previous volume's claimRef = %+v, want it untouched", pv.Spec.ClaimRef)
			}
			evs := f.events()
			if got := reasons(evs, ReasonVolumeRebound); len(got) != 0 {
				t.Errorf("VolumeRebound events %q", got)
			}
			// Told once, and only where the volume opted in and the flag is on.
			want := 0
			if tt.wantTold {
				want = 1
			}
			if got := reasons(evs, ReasonVolumeRebindRefused); len(got) != want {
				t.Errorf("VolumeRebindRefused events %q, want %d", got, want)
			}
		})
	}
}

// TestRebindWaitsForRelease: the new claim is seen before the volume sync has released the
// volume of the old one. It must neither take another volume nor be provisioned for: it
// waits, and gets its volume once Released.
func TestRebindWaitsForRelease(t *testing.T) {
	pv := releasedFor("old", "1Gi", pvPhase(v1.VolumeBound))
	api := newAPIServer(pv, makePV("spare", "1Gi"), makeClaim("data", "1Gi"))
	f := newFixtureWith(t, api, rebindOptions())
	if err := f.syncClaim("data"); err != nil {
		t.Fatal(err)
	}
	if w, _ := api.counts(); w != 0 {
		t.Fatalf("%d writes while the previous volume is still Bound, want none", w)
	}
	f.settle()
	assertBound(t, api, "data", "old", true)
	if pv := api.pv(t, "spare"); pv.Spec.ClaimRef != nil {
		t.Errorf("spare claimed: %+v", pv.Spec.ClaimRef)
	}
}

// TestRebindVerifiesLive: the cache's claim is not the one the API server holds under that
// name (deleted and created again since): no rebind from the cache's word.
func TestRebindVerifiesLive(t *testing.T) {
	api := newAPIServer(releasedFor("old", "1Gi"), makeClaim("data", "1Gi"))
	f := newFixtureWith(t, api, rebindOptions())
	newer := makeClaim("data", "1Gi")
	newer.UID = "uid-newer-data"
	if err := api.Tracker().Update(pvcResource, newer, testNS); err != nil {
		t.Fatal(err)
	}
	if err := f.syncClaim("data"); err != nil {
		t.Fatal(err)
	}
	if pv := api.pv(t, "old"); pv.Spec.ClaimRef.UID != oldClaimUID {
		t.Fatalf("rebound to %s on the cache's word", pv.Spec.ClaimRef.UID)
	}
}

// TestRebindRaceHasOneWinner: two binders with the same view rebind the same volume; the
// conditioned write lets one win, the other conflicts and then finds the bind done.
func TestRebindRaceHasOneWinner(t *testing.T) {
	api := newAPIServer(releasedFor("old", "1Gi"), makeClaim("data", "1Gi"))
	a, b := newFixtureWith(t, api, rebindOptions()), newFixtureWith(t, api, rebindOptions())
	if err := a.syncClaim("data"); err != nil {
		t.Fatal(err)
	}
	err := b.syncClaim("data")
	if err == nil || !strings.Contains(err.Error(), "modified") {
		t.Fatalf("second binder: %v, want a conflict", err)
	}
	if evs := reasons(b.events(), ReasonVolumeRebound); len(evs) != 0 {
		t.Fatalf("the losing binder wrote %q", evs)
	}
	b.settle()
	assertBound(t, api, "data", "old", true)
	if evs := reasons(b.events(), ReasonVolumeRebound); len(evs) != 0 {
		t.Fatalf("the losing binder wrote %q after catching up", evs)
	}
}

func TestOversizedBindEvent(t *testing.T) {
	for _, tt := range []struct {
		name  string
		ratio float64
		pv    string
		want  int
	}{
		{"ten times", 2, "10Gi", 1},
		{"just under", 2, "1999Mi", 0},
		{"exactly the ratio", 2, "2Gi", 1},
		{"off", 0, "10Gi", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			api := newAPIServer(makePV("pv", tt.pv), makeClaim("data", "1Gi"))
			opts := DefaultOptions()
			opts.OversizedBindEventRatio = tt.ratio
			f := newFixtureWith(t, api, opts)
			f.settle()
			assertBound(t, api, "data", "pv", true)
			// A resync of the bound claim adds none.
			_ = f.c.syncClaimKey(context.Background(), claimKey(testNS, "data"))
			evs := reasons(f.events(), ReasonOversizedVolumeBound)
			if len(evs) != tt.want {
				t.Fatalf("events %q, want %d", evs, tt.want)
			}
			if tt.want == 1 && !strings.Contains(evs[0], tt.pv) {
				t.Errorf("event %q does not give the volume's size", evs[0])
			}
		})
	}
}

// TestRebindRefusalToldOnce: a claim left Pending syncs again and again; its refusal is told
// once, and again to a new claim of the same name.
func TestRebindRefusalToldOnce(t *testing.T) {
	api := newAPIServer(releasedFor("old", "1Gi"), makeClaim("data", "2Gi"))
	f := newFixtureWith(t, api, rebindOptions())
	for range 3 {
		if err := f.syncClaim("data"); err != nil {
			t.Fatal(err)
		}
	}
	if got := reasons(f.events(), ReasonVolumeRebindRefused); len(got) != 1 || !strings.Contains(got[0], "too small") {
		t.Fatalf("events %q, want one saying the volume is too small", got)
	}
	f.c.onClaimDelete(api.claim(t, "data"))
	if err := f.syncClaim("data"); err != nil {
		t.Fatal(err)
	}
	if got := reasons(f.events(), ReasonVolumeRebindRefused); len(got) != 1 {
		t.Fatalf("events after the claim was forgotten %q, want one", got)
	}
}
