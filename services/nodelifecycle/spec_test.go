package nodelifecycle

import (
	"testing"

	"github.com/kcm-split/kcm-split/shared/app/apptest"
)

func TestSpec(t *testing.T) { apptest.CheckSpec(t, Spec, ControllerID, DefaultPort) }

// The binary's budget is the three upstream controllers' together (see DefaultQPS).
func TestOwnBudget(t *testing.T) {
	if s := Spec(); s.DefaultQPS != 3*20 || s.DefaultBurst != 3*30 {
		t.Errorf("Spec budget = %v/%d, want 60/90: node-lifecycle, taint-eviction and node-ipam at upstream's 20/30 each", s.DefaultQPS, s.DefaultBurst)
	}
}
