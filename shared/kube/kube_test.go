package kube

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("{{{ not yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	base := Options{QPS: 20, Burst: 30, ContentType: ContentTypeProtobuf}
	for _, tc := range []struct {
		name     string
		mod      func(*Options)
		wantFlag string
		wantMsg  string
	}{
		{"defaults", func(*Options) {}, "", ""},
		{"good kubeconfig", func(o *Options) { o.Kubeconfig = good }, "", ""},
		{"negative qps", func(o *Options) { o.QPS = -1 }, "kube-api-qps", "negative"},
		{"negative burst", func(o *Options) { o.Burst = -1 }, "kube-api-burst", "negative"},
		{"bad content type", func(o *Options) { o.ContentType = "text/xml" }, "kube-api-content-type", "text/xml"},
		{"missing kubeconfig", func(o *Options) { o.Kubeconfig = filepath.Join(dir, "nope") }, "kubeconfig", "no such file"},
		{"garbage kubeconfig", func(o *Options) { o.Kubeconfig = garbage }, "kubeconfig", "does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.mod(&o)
			err := o.Validate()
			if tc.wantFlag == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var fe *FlagError
			if !errors.As(err, &fe) || fe.Flag != tc.wantFlag || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("err = %v, want flag %s with %q", err, tc.wantFlag, tc.wantMsg)
			}
		})
	}
}

func TestRESTConfigAppliesTuning(t *testing.T) {
	cfg, err := RESTConfig(Options{Master: "https://127.0.0.1:1", QPS: 7, Burst: 9, ContentType: ContentTypeProtobuf, UserAgent: UserAgent("x-controller", "v1", "")})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS != 7 || cfg.Burst != 9 || cfg.ContentType != ContentTypeProtobuf || !strings.HasPrefix(cfg.UserAgent, "x-controller/v1 (") {
		t.Fatalf("config not tuned: qps=%v burst=%v ct=%q ua=%q", cfg.QPS, cfg.Burst, cfg.ContentType, cfg.UserAgent)
	}
}

func TestWarningsLoggedOnce(t *testing.T) {
	d := &dedupWarnings{}
	for range 3 {
		d.HandleWarningHeaderWithContext(t.Context(), 299, "", "v1 Endpoints is deprecated")
	}
	n := 0
	d.seen.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("remembered %d warnings, want 1", n)
	}
}
