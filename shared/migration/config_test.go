package migration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "migration.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const header = "apiVersion: controllermanager.config.k8s.io/v1\nkind: LeaderMigrationConfiguration\n"

func TestLoadFilter(t *testing.T) {
	p := writeConfig(t, header+`leaderName: m
controllerLeaders:
- {name: endpoints-controller, component: kcm-split}
- {name: endpointslice-controller, component: "*"}
- {name: endpointslice-mirroring-controller, component: kube-controller-manager}
`)
	cfg, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LeaderName != "m" {
		t.Errorf("LeaderName = %q", cfg.LeaderName)
	}
	f := cfg.Filter([]string{"endpoints-controller"})
	for name, want := range map[string]int{
		"endpoints-controller":               Migrated,
		"endpointslice-controller":           Migrated,
		"endpointslice-mirroring-controller": Unowned,
		"namespace-controller":               NotListed,
	} {
		if got := f(name); int(got) != want {
			t.Errorf("%s: %d, want %d", name, got, want)
		}
	}
}

func TestLoadDefault(t *testing.T) {
	cfg, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LeaderName != DefaultLeaderName {
		t.Errorf("LeaderName = %q", cfg.LeaderName)
	}
	f := cfg.Filter([]string{"a", "b"})
	if f("a") != Migrated || f("b") != Migrated || f("c") != NotListed {
		t.Errorf("default: a=%d b=%d c=%d", f("a"), f("b"), f("c"))
	}
}

func TestLoadBad(t *testing.T) {
	for name, tc := range map[string]struct{ body, want string }{
		"endpoints lock": {"apiVersion: controllermanager.config.k8s.io/v1beta1\nkind: LeaderMigrationConfiguration\nleaderName: m\nresourceLock: endpoints\ncontrollerLeaders: [{name: a, component: kcm-split}]\n", "only \"leases\""},
		"no leader name": {header + "controllerLeaders: [{name: a, component: kcm-split}]\n", "leaderName"},
		"no component":   {header + "leaderName: m\ncontrollerLeaders: [{name: a}]\n", "component"},
		"unknown field":  {header + "leaderName: m\nleaders: []\n", "unknown field"},
		"empty leaders":  {header + "leaderName: m\n", "controllerLeaders is empty"},
		"wrong kind":     {"apiVersion: v1\nkind: ConfigMap\n", ""},
		"not yaml":       {"{{{", ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(writeConfig(t, tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("absent file accepted")
	}
}
