package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The sample-apiserver image is built only when asked for (-sample-apiserver), so make images
// without it builds what it built before; asked for a binary that is not there, it fails
// naming how to build it.
func TestSampleAPIServerOnlyWhenAsked(t *testing.T) {
	root := filepath.Join("..", "..")
	node := []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}}
	stub := filepath.Join(t.TempDir(), "agnhost-stub")
	if err := os.WriteFile(stub, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	has := func(o options) bool {
		t.Helper()
		ts, err := projectTargets(root, o, nil, node)
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range ts {
			if tg.name == "sample-apiserver" {
				return true
			}
		}
		return false
	}
	if has(options{agnhost: stub, registry: "ghcr.io/x", version: "v1"}) {
		t.Error("make images without -sample-apiserver builds the sample-apiserver image")
	}
	if !has(options{agnhost: stub, sampleAPIServer: stub, registry: "ghcr.io/x", version: "v1"}) {
		t.Error("-sample-apiserver builds no sample-apiserver image")
	}
	missing := filepath.Join(t.TempDir(), "sample-apiserver")
	_, err := projectTargets(root, options{sampleAPIServer: missing, registry: "ghcr.io/x", version: "v1"}, nil, node)
	if err == nil || !strings.Contains(err.Error(), "TOOLS_ONLY=sample-apiserver") {
		t.Errorf("a missing binary: %v, want an error naming TOOLS_ONLY=sample-apiserver", err)
	}
}

// make images' sample-apiserver image from the real binary (bin/sample-apiserver, which
// TOOLS_ONLY=sample-apiserver deploy/tools/build.sh builds): named as e2e.test asks, root,
// entrypoint /sample-apiserver and no command (the Aggregator spec's Pod passes only flags),
// one layer whose binary, run from the unpacked layer (in a chroot as root), accepts every flag
// the spec passes and serves on port 443 by default, where the spec's probe and Service look.
func TestSampleAPIServerImage(t *testing.T) {
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", "sample-apiserver"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no %s (TOOLS_ONLY=sample-apiserver deploy/tools/build.sh builds it)", bin)
	}
	out := t.TempDir()
	err = run(context.Background(), options{
		root: filepath.Join("..", ".."), out: out, version: "v0.0.0-test", registry: "ghcr.io/x", source: "https://example.com/src",
		platforms: "linux/" + runtime.GOARCH, nodePlatform: "linux/" + runtime.GOARCH, only: "sample-apiserver",
		sampleAPIServer: bin, epoch: testEpoch,
	})
	if err != nil {
		t.Fatal(err)
	}
	img, cf := standinImage(t, filepath.Join(out, "sample-apiserver.tar"), filepath.Join(out, "layout"), SampleAPIServerRef)
	if strings.Join(cf.Config.Entrypoint, " ") != "/sample-apiserver" || len(cf.Config.Cmd) != 0 || cf.Config.User != "0:0" {
		t.Errorf("entrypoint %q cmd %q user %q, want /sample-apiserver, none, 0:0", cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User)
	}
	// Unpacked once (the layer is large): extractLayer keeps the permission bits.
	root := filepath.Join(out, "root")
	extractLayer(t, img, root)
	fi, err := os.Stat(filepath.Join(root, "sample-apiserver"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode() != 0o755 {
		t.Fatalf("/sample-apiserver mode %v, want -rwxr-xr-x", fi.Mode())
	}
	cmd := []string{filepath.Join(root, "sample-apiserver")}
	if os.Getuid() == 0 {
		cmd = []string{"chroot", root, "/sample-apiserver"}
	}
	// The Aggregator spec's arguments (test/e2e/apimachinery/aggregator.go), then --help: the
	// flags are parsed first, so an unknown one fails instead of printing the help.
	cmd = append(cmd, "--etcd-servers=http://127.0.0.1:2379",
		"--tls-cert-file=/apiserver.local.config/certificates/tls.crt",
		"--tls-private-key-file=/apiserver.local.config/certificates/tls.key",
		"--audit-log-path=-", "--audit-log-maxage=0", "--audit-log-maxbackup=0", "--help")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := exec.CommandContext(ctx, cmd[0], cmd[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd, " "), err, got)
	}
	help := string(got)
	if !strings.Contains(help, "Launch a wardle API server") {
		t.Errorf("--help printed no wardle server's help:\n%s", help)
	}
	for _, line := range strings.Split(help, "\n") {
		if strings.Contains(line, "--secure-port int") && !strings.Contains(line, "(default 443)") {
			t.Errorf("the secure port is not 443 by default: %s", strings.TrimSpace(line))
		}
	}
	if !strings.Contains(help, "--secure-port int") {
		t.Error("--help names no --secure-port")
	}
}
