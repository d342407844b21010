package plan

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The manifest kubeadm v1.36 writes reads flag by flag, the take-over's namespace and selector
// from its metadata.
func TestReadKubeadmManifest(t *testing.T) {
	src, err := readManifest("testdata/kube-controller-manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if src.Namespace != "kube-system" || src.Selector != "component=kube-controller-manager" {
		t.Errorf("namespace %q, selector %q", src.Namespace, src.Selector)
	}
	want := map[string]string{
		"allocate-node-cidrs":              "true",
		"authentication-kubeconfig":        "/etc/kubernetes/controller-manager.conf",
		"authorization-kubeconfig":         "/etc/kubernetes/controller-manager.conf",
		"bind-address":                     "127.0.0.1",
		"client-ca-file":                   "/etc/kubernetes/pki/ca.crt",
		"cluster-cidr":                     "10.244.0.0/16",
		"cluster-name":                     "kubernetes",
		"cluster-signing-cert-file":        "/etc/kubernetes/pki/ca.crt",
		"cluster-signing-key-file":         "/etc/kubernetes/pki/ca.key",
		"controllers":                      "*,bootstrapsigner,tokencleaner",
		"kubeconfig":                       "/etc/kubernetes/controller-manager.conf",
		"leader-elect":                     "true",
		"requestheader-client-ca-file":     "/etc/kubernetes/pki/front-proxy-ca.crt",
		"root-ca-file":                     "/etc/kubernetes/pki/ca.crt",
		"service-account-private-key-file": "/etc/kubernetes/pki/sa.key",
		"service-cluster-ip-range":         "10.96.0.0/12",
		"use-service-account-credentials":  "true",
	}
	got := map[string]string{}
	for _, g := range src.Flags {
		if !g.Known {
			t.Errorf("--%s: not known", g.Name)
		}
		got[g.Name] = g.Value
	}
	if len(got) != len(want) {
		t.Errorf("read %d flags, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("--%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestReadManifestRefuses(t *testing.T) {
	dir := t.TempDir()
	pod := func(containers string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kcm\nspec:\n  containers:\n" + containers
	}
	for _, tc := range []struct {
		name, manifest, want string
	}{
		{"not yaml", "{[", "not a Pod manifest"},
		{"a Deployment", "apiVersion: apps/v1\nkind: Deployment\n", `kind "Deployment"`},
		{"two other containers", pod("  - name: a\n    image: a\n  - name: b\n    image: b\n"), "no container named kube-controller-manager"},
		{"a shell", pod("  - name: kube-controller-manager\n    command: [/bin/sh, -c, 'kube-controller-manager --v=2']\n"), "a wrapper (a shell, a script) cannot be read"},
		{"the environment", pod("  - name: kube-controller-manager\n    command: [kube-controller-manager, '--cluster-cidr=$(CIDR)']\n"), "expanded by the kubelet"},
		{"a bad value", pod("  - name: kube-controller-manager\n    command: [kube-controller-manager, --node-eviction-rate=fast]\n"),
			"--node-eviction-rate=fast: not a number (kube-controller-manager refuses it too)"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
		if err := os.WriteFile(p, []byte(tc.manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := readManifest(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := readManifest(filepath.Join(dir, "absent.yaml")); err == nil || !strings.Contains(err.Error(), "--manifest") {
		t.Errorf("absent file: %v", err)
	}
	// Args after an image's own entrypoint, and a path to the program, are read.
	p := filepath.Join(dir, "args.yaml")
	if err := os.WriteFile(p, []byte(pod("  - name: kcm\n    command: [/usr/local/bin/kube-controller-manager]\n    args: [--v=3]\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := readManifest(p)
	if err != nil || len(src.Flags) != 1 || src.Flags[0].Value != "3" || src.Namespace != "kube-system" {
		t.Errorf("command and args: %+v, %v", src, err)
	}
}

// kube-controller-manager's reading of its arguments (pflag's): both forms of a value, a
// boolean alone, the -v shorthand, "_" for "-", the last of a repeated value, lists adding up.
func TestParseFlags(t *testing.T) {
	got, err := parseFlags([]string{
		"--node-monitor-grace-period", "40s", "--allocate-node-cidrs", "--leader-elect=false",
		"-v", "4", "--concurrent_endpoint_syncs=0x10", "--kube-api-qps=30", "--kube-api-qps=40",
		"--controllers=*,-endpoint", "--controllers", "-namespace", "--feature-gates=A=true", "--feature-gates=kube:B=false",
		"--not-a-kcm-flag=1", "--neither", "--help=false",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"--node-monitor-grace-period=40s", "--allocate-node-cidrs", "--leader-elect=false", "--v=4",
		"--concurrent-endpoint-syncs=16", "--kube-api-qps=40", "--controllers=*,-endpoint,-namespace",
		"--feature-gates=A=true,kube:B=false", "--not-a-kcm-flag=1", "--neither", "--help=false",
	}
	var have []string
	for _, g := range got {
		have = append(have, g.String())
	}
	if !slices.Equal(have, want) {
		t.Errorf("read\n  %v\nwant\n  %v", have, want)
	}
	if g := got[5]; !slices.Equal(g.Written, []string{"--kube-api-qps=30", "--kube-api-qps=40"}) {
		t.Errorf("--kube-api-qps written as %v", g.Written)
	}
	if got[8].Known || got[9].Known || !got[0].Known {
		t.Errorf("known: %v %v %v", got[0].Known, got[8].Known, got[9].Known)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"positional"}, `argument "positional" is not a flag`},
		{[]string{"-kubeconfig=x"}, `argument "-kubeconfig=x" is not a flag`},
		{[]string{"--cluster-cidr"}, "--cluster-cidr needs a value"},
		{[]string{"--unknown-flag", "value"}, "--unknown-flag is not a flag of kube-controller-manager v1.36, so whether \"value\" is its value cannot be told"},
		{[]string{"--concurrent-gc-syncs=3000000000"}, "not a 32-bit integer"},
		{[]string{"--leader-elect=maybe"}, "not a boolean"},
		{[]string{"--node-monitor-period=5"}, "not a duration"},
		{[]string{"--feature-gates=A"}, `"A" is not Gate=true|false`},
	} {
		if _, err := parseFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
