package plan

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// controllersArgs decodes a ClusterConfiguration and returns controllerManager.extraArgs.
func controllersArgs(t *testing.T, doc []byte) (map[string]any, []map[string]string) {
	t.Helper()
	var cfg struct {
		ControllerManager struct {
			ExtraArgs []map[string]string `yaml:"extraArgs"`
		} `yaml:"controllerManager"`
	}
	if err := yaml.Unmarshal(doc, &cfg); err != nil {
		t.Fatalf("output is not YAML: %v\n%s", err, doc)
	}
	var all map[string]any
	if err := yaml.Unmarshal(doc, &all); err != nil {
		t.Fatal(err)
	}
	return all, cfg.ControllerManager.ExtraArgs
}

func TestWithControllers(t *testing.T) {
	real, err := os.ReadFile("testdata/kubeadm-config.clusterconfiguration.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const value = "*,bootstrapsigner,tokencleaner,-namespace-controller"

	t.Run("kubeadm's own: controllerManager {} gets the entry, the rest is kept", func(t *testing.T) {
		out, err := withControllers(real, value)
		if err != nil {
			t.Fatal(err)
		}
		all, args := controllersArgs(t, out)
		if len(args) != 1 || args[0]["name"] != "controllers" || args[0]["value"] != value {
			t.Fatalf("extraArgs = %v, want the one controllers entry", args)
		}
		_, before := controllersArgs(t, real)
		if len(before) != 0 {
			t.Fatalf("testdata already has extraArgs: %v", before)
		}
		var orig map[string]any
		if err := yaml.Unmarshal(real, &orig); err != nil {
			t.Fatal(err)
		}
		delete(orig, "controllerManager")
		delete(all, "controllerManager")
		ob, _ := yaml.Marshal(orig)
		nb, _ := yaml.Marshal(all)
		if string(ob) != string(nb) {
			t.Errorf("settings other than controllerManager changed:\n%s\nvs\n%s", ob, nb)
		}
		if !strings.Contains(string(out), "# kubeadm v1.36.3's ClusterConfiguration") {
			t.Error("the file's comment was dropped")
		}
	})
	t.Run("an existing entry is replaced, the others stay in order", func(t *testing.T) {
		in := strings.Replace(string(real), "controllerManager: {}", `controllerManager:
  extraArgs:
  - name: bind-address
    value: 0.0.0.0
  - name: controllers
    value: "*,bootstrapsigner,tokencleaner"
  - name: node-monitor-grace-period
    value: 50s`, 1)
		out, err := withControllers([]byte(in), value)
		if err != nil {
			t.Fatal(err)
		}
		_, args := controllersArgs(t, out)
		want := []string{"bind-address=0.0.0.0", "controllers=" + value, "node-monitor-grace-period=50s"}
		var got []string
		for _, a := range args {
			got = append(got, a["name"]+"="+a["value"])
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("extraArgs = %v, want %v", got, want)
		}
		again, err := withControllers(out, value)
		if err != nil || string(again) != string(out) {
			t.Errorf("applying it twice changed the file (err %v):\n%s\nvs\n%s", err, out, again)
		}
	})
	for _, tc := range []struct{ name, in, why string }{
		{"not YAML", "a: [", "--cluster-config"},
		{"another kind", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n", `kind "InitConfiguration"`},
		{"v1beta3: extraArgs is a map there", "apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\n", "kubeadm config migrate"},
		{"extraArgs not a list", "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrollerManager:\n  extraArgs: {controllers: x}\n", "extraArgs is not a list"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			_, err := withControllers([]byte(tc.in), value)
			var ie inputError
			if err == nil || !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("err = %v, want a bad-input error with %q", err, tc.why)
			}
		})
	}
}

// The command end to end: kubeadm's manifest read, the cluster's ClusterConfiguration on stdin,
// the merged file on stdout; without --cluster-config it is a usage error.
func TestMainClusterConfig(t *testing.T) {
	real, err := os.ReadFile("testdata/kubeadm-config.clusterconfiguration.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	args := []string{"--manifest=testdata/kube-controller-manager.yaml", "--controllers=namespace", "-o", "cluster-config", "--cluster-config=-"}
	if code := Main(context.Background(), args, strings.NewReader(string(real)), &out, &errOut); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	_, got := controllersArgs(t, []byte(out.String()))
	if len(got) != 1 || got[0]["value"] != "*,bootstrapsigner,tokencleaner,-namespace-controller" {
		t.Errorf("extraArgs = %v", got)
	}
	out.Reset()
	errOut.Reset()
	if code := Main(context.Background(), args[:4], strings.NewReader(""), &out, &errOut); code != ExitUsage || !strings.Contains(errOut.String(), "needs --cluster-config") {
		t.Errorf("without --cluster-config: exit %d, %q", code, errOut.String())
	}
}
