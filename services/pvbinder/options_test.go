package pvbinder

import (
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/app/apptest"
)

func TestOptionsValidate(t *testing.T) {
	apptest.Validate(t, []apptest.ValidateCase[Options]{
		{Name: "defaults", Opts: DefaultOptions()},
		{Name: "one worker, short period", Opts: Options{Workers: 1, SyncPeriod: time.Second}},
		{Name: "no workers", Opts: Options{Workers: 0, SyncPeriod: time.Second}, WantFlag: FlagWorkers},
		{Name: "zero period", Opts: Options{Workers: 1}, WantFlag: FlagSyncPeriod},
		{Name: "negative recycler timeout", Opts: func() Options { o := DefaultOptions(); o.RecyclerMinTimeoutHostPath = -1; return o }(), WantFlag: FlagRecyclerMinTimeoutHostPath},
		{Name: "oversize ratio off", Opts: func() Options { o := DefaultOptions(); o.OversizedBindEventRatio = 0; return o }()},
		{Name: "oversize ratio of 1", Opts: func() Options { o := DefaultOptions(); o.OversizedBindEventRatio = 1; return o }(), WantFlag: FlagOversizedBindEventRatio},
		{Name: "negative oversize ratio", Opts: func() Options { o := DefaultOptions(); o.OversizedBindEventRatio = -2; return o }(), WantFlag: FlagOversizedBindEventRatio},
		{Name: "missing recycler template", Opts: func() Options { o := DefaultOptions(); o.RecyclerTemplateNFS = "/nonexistent/pod.yaml"; return o }(), WantFlag: FlagRecyclerTemplateNFS},
	})
}

func TestDefaultSyncPeriodIsUpstreams(t *testing.T) {
	if d := DefaultOptions(); d.SyncPeriod != 15*time.Second || d.Workers < 1 {
		t.Errorf("defaults = %+v, want upstream's 15s sync period", d)
	}
}

// Upstream's provisioning defaults: dynamic provisioning on, the host-path provisioner off.
func TestDefaultProvisioningIsUpstreams(t *testing.T) {
	if d := DefaultOptions(); !d.DynamicProvisioning || d.HostPathProvisioner {
		t.Errorf("defaults = %+v, want dynamic provisioning on and the host-path provisioner off", d)
	}
}

// Rebinding a Released volume is observable (a volume upstream leaves Released is bound):
// off by default.
func TestDefaultRebindIsOff(t *testing.T) {
	if d := DefaultOptions(); d.RebindOnRecreate || d.OversizedBindEventRatio <= 1 {
		t.Errorf("defaults = %+v, want rebind off and the oversize Event on", d)
	}
}

func TestDefaultRecyclerTimeoutsAreUpstreams(t *testing.T) {
	d := DefaultOptions()
	if d.RecyclerMinTimeoutNFS != 300 || d.RecyclerIncrementNFS != 30 || d.RecyclerMinTimeoutHostPath != 60 || d.RecyclerIncrementHostPath != 30 ||
		d.RecyclerTemplateNFS != "" || d.RecyclerTemplateHostPath != "" {
		t.Errorf("defaults = %+v, want upstream's 300/30 (NFS) and 60/30 (hostPath), default templates", d)
	}
}

// Bad values, from flags or the environment, exit with the usage code before anything
// connects anywhere.
func TestBadFlagsExitWithUsageCode(t *testing.T) {
	apptest.BadFlags(t, Spec, []apptest.BadFlag{
		{Name: "zero workers", Args: []string{"--" + FlagWorkers + "=0"}, WantFlag: FlagWorkers},
		{Name: "unreadable recycler template", Args: []string{"--" + FlagRecyclerTemplateHostPath + "=/nonexistent/pod.yaml"}, WantFlag: FlagRecyclerTemplateHostPath},
		{Name: "negative period", Args: []string{"--" + FlagSyncPeriod + "=-1s"}, WantFlag: FlagSyncPeriod},
		{Name: "from the environment", Env: map[string]string{app.EnvVar(FlagSyncPeriod): "0s"}, WantFlag: FlagSyncPeriod},
	})
}

func TestSpec(t *testing.T) { apptest.CheckSpec(t, Spec, ControllerID, DefaultPort) }

// The binder's own budget is its flags' defaults (shared/app applies them and lets the flags
// override them; see TestOwnClientBudget there).
func TestOwnBudget(t *testing.T) {
	if s := Spec(); s.DefaultQPS != DefaultQPS || s.DefaultBurst != DefaultBurst || DefaultQPS <= 20 || DefaultBurst <= 30 {
		t.Errorf("Spec budget = %v/%d, want the binder's own %v/%d, above the shared 20/30", s.DefaultQPS, s.DefaultBurst, DefaultQPS, DefaultBurst)
	}
}
