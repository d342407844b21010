package main

import (
	"archive/tar"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// realAgnhost is bin/agnhost (make images builds it there), or the test skips.
func realAgnhost(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", "agnhost"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no %s (make images builds it)", bin)
	}
	return bin
}

// freePort is a TCP port of loopback nobody listens on (for a program that takes a port, not
// a listener).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startBounded runs cmd until the test ends (killed then, and after a minute at most).
func startBounded(t *testing.T, name string, args []string, setup func(*exec.Cmd)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cmd := exec.CommandContext(ctx, name, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if setup != nil {
		setup(cmd)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s %s:\n%s", name, strings.Join(args, " "), out.String())
		}
	})
}

// get retries a GET for up to 20 s while the server starts.
func get(t *testing.T, c *http.Client, url string) []byte {
	t.Helper()
	var last error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := c.Get(url)
		if err != nil {
			last = err
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("%s: %v %s", resp.Status, err, b)
			continue
		}
		return b
	}
	t.Fatalf("GET %s: %v", url, last)
	return nil
}

// agnhostExtraFiles is what the agnhost target adds besides its binary and userland, built
// for created.
func agnhostExtraFiles(t *testing.T, created time.Time) []File {
	t.Helper()
	agnhost := filepath.Join(t.TempDir(), "agnhost-stub")
	if err := os.WriteFile(agnhost, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	ts, err := projectTargets(filepath.Join("..", ".."), options{agnhost: agnhost, registry: "ghcr.io/x", version: "v1"},
		nil, []v1.Platform{{OS: "linux", Architecture: runtime.GOARCH}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range ts {
		if tg.name == "agnhost" && tg.extra != nil {
			files, err := tg.extra(created)
			if err != nil {
				t.Fatal(err)
			}
			return files
		}
	}
	t.Fatal("the agnhost image gets no files besides its userland")
	return nil
}

// The agnhost image carries /localhost.crt and /localhost.key: a valid pair, for the name
// localhost, reproducible from the epoch; upstream's porter, run in the unpacked layer's root
// as its working directory, serves TLS with them to a client that trusts only that
// certificate and checks the name localhost.
func TestAgnhostLocalhostTLS(t *testing.T) {
	created := time.Unix(testEpoch, 0)
	files := agnhostExtraFiles(t, created)
	again := agnhostExtraFiles(t, created)
	later := agnhostExtraFiles(t, created.Add(time.Second))
	byName := func(fs []File, name string) []byte {
		for _, f := range fs {
			if f.Name == name {
				return f.Data
			}
		}
		t.Fatalf("no %s among the agnhost image's files", name)
		return nil
	}
	for _, name := range []string{LocalhostCert, LocalhostKey} {
		if string(byName(files, name)) != string(byName(again, name)) {
			t.Errorf("%s differs between two builds of one epoch", name)
		}
		if string(byName(files, name)) == string(byName(later, name)) {
			t.Errorf("%s is the same for another epoch", name)
		}
	}

	// In the layer, at / (porter's working directory).
	dir := t.TempDir()
	img, err := Image(Spec{
		Binary: buildPause(t, dir, runtime.GOARCH), Path: "/agnhost", Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Created: created, User: "0:0", Files: withFiles(nil, files...),
	})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	extractLayer(t, img, root)
	crt, err := os.ReadFile(filepath.Join(root, LocalhostCert))
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(root, LocalhostKey))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatalf("the layer's files are no pair: %v", err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			t.Fatal(err)
		}
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	for _, name := range []string{"localhost", "127.0.0.1", "::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: created.Add(24 * time.Hour),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "example.com", CurrentTime: created.Add(time.Hour)}); err == nil {
		t.Error("the certificate verifies for example.com too")
	}

	// Upstream's porter, its working directory the layer's root.
	bin := realAgnhost(t)
	port := freePort(t)
	const body = "served-over-tls-by-porter"
	startBounded(t, bin, []string{"porter"}, func(c *exec.Cmd) {
		c.Dir = root
		c.Env = []string{fmt.Sprintf("SERVE_TLS_PORT_%d=%s", port, body)}
	})
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12},
	}}
	if got := get(t, client, fmt.Sprintf("https://127.0.0.1:%d/", port)); string(got) != body {
		t.Errorf("porter answered %q, want %q", got, body)
	}
}

// /agnhost-2 in the agnhost image is the binary by another name, as the Containers specs run
// it: in the unpacked layer (chroot, root), `/agnhost-2 entrypoint-tester override arguments`
// prints its arguments as those specs expect them.
func TestAgnhostSecondEntrypoint(t *testing.T) {
	bin := realAgnhost(t)
	dir := t.TempDir()
	img, err := Image(Spec{
		Binary: bin, Path: "/agnhost", Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Created: time.Unix(testEpoch, 0), User: "0:0", Files: withFiles(nil, agnhostExtraFiles(t, time.Unix(testEpoch, 0))...),
	})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	extractLayer(t, img, root)
	if l, err := os.Readlink(filepath.Join(root, "agnhost-2")); err != nil || l != "agnhost" {
		t.Fatalf("/agnhost-2 links to %q (%v), want agnhost", l, err)
	}
	if os.Getuid() != 0 {
		t.Skip("running in the unpacked layer needs chroot (root)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "chroot", root, "/agnhost-2", "entrypoint-tester", "override", "arguments").CombinedOutput()
	if err != nil {
		t.Fatalf("chroot /agnhost-2: %v\n%s", err, out)
	}
	if want := "[/agnhost-2 entrypoint-tester override arguments]"; !strings.Contains(string(out), want) {
		t.Errorf("/agnhost-2 printed %q, want %s", out, want)
	}
}

// buildStandins runs make images for the stand-ins only names (-only), with the real agnhost,
// for this machine's platform, and returns the folder their archives are in.
func buildStandins(t *testing.T, only string, with ...func(*options)) string {
	t.Helper()
	bin := realAgnhost(t)
	out := t.TempDir()
	o := options{
		root: filepath.Join("..", ".."), out: out, version: "v0.0.0-test", registry: "ghcr.io/x", source: "https://example.com/src",
		platforms: "linux/" + runtime.GOARCH, nodePlatform: "linux/" + runtime.GOARCH, only: only,
		agnhost: bin, epoch: testEpoch,
	}
	for _, f := range with {
		f(&o)
	}
	err := run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// standinImage unpacks a stand-in's archive into dir and returns its one image, which must
// be the archive's one entry, named ref, an index of one platform's image, and its config.
func standinImage(t *testing.T, archive, dir, ref string) (v1.Image, *v1.ConfigFile) {
	t.Helper()
	top, m := readArchive(t, archive, dir)
	if len(m.Manifests) != 1 || m.Manifests[0].Annotations[annotationContainerdName] != ref {
		t.Fatalf("index.json: %+v, want one image named %s", m.Manifests, ref)
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) != 1 {
		t.Fatalf("index: %v %+v", err, im)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return img, cf
}

// make images' nautilus and kitten stand-ins, built from the real agnhost: each tarball names
// the image e2e.test asks for, runs agnhost test-webserver, and, unpacked and run in a chroot
// (root) on a loopback port, answers /data.json as the Update Demo spec reads it: "image" holds
// the picture's name.
func TestUpdateDemoStandins(t *testing.T) {
	out := buildStandins(t, "nautilus,kitten")
	for _, ud := range []struct{ name, ref, picture string }{
		{"nautilus", NautilusRef, "nautilus.jpg"}, {"kitten", KittenRef, "kitten.jpg"},
	} {
		t.Run(ud.name, func(t *testing.T) {
			img, cf := standinImage(t, filepath.Join(out, ud.name+".tar"), filepath.Join(out, ud.name+"-layout"), ud.ref)
			if strings.Join(cf.Config.Entrypoint, " ") != "/agnhost" || strings.Join(cf.Config.Cmd, " ") != "test-webserver" || cf.Config.WorkingDir != "/" {
				t.Errorf("entrypoint %q cmd %q workdir %q", cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.WorkingDir)
			}
			root := filepath.Join(out, ud.name+"-root")
			extractLayer(t, img, root)
			b, err := os.ReadFile(filepath.Join(root, "data.json"))
			if err != nil {
				t.Fatal(err)
			}
			var data struct{ Image string }
			if err := json.Unmarshal(b, &data); err != nil || data.Image != ud.picture {
				t.Fatalf("/data.json %s: %v", b, err)
			}
			if os.Getuid() != 0 {
				t.Skip("serving from the unpacked layer needs chroot (root)")
			}
			port := freePort(t)
			// The image's command with the spec Pod's port moved to a free one.
			startBounded(t, "chroot", []string{root, "/agnhost", "test-webserver", fmt.Sprintf("--port=%d", port)}, nil)
			got := get(t, &http.Client{Timeout: 5 * time.Second}, fmt.Sprintf("http://127.0.0.1:%d/data.json", port))
			// As the spec reads it (kubectl.go's getUDData): "image" must contain the picture.
			var served struct{ Image string }
			if err := json.Unmarshal(got, &served); err != nil || !strings.Contains(served.Image, ud.picture) {
				t.Errorf("/data.json served %q (%v), want an image naming %s", got, err, ud.picture)
			}
		})
	}
}

// make images' nonewprivs stand-in: the real agnhost, setuid root (mode 04755 in the layer),
// running its nonewprivs subcommand. Unpacked and run in a chroot as uid 1000 (root only), it
// reports effective uid 0 (the escalation the setuid bit gives), and 1000 under no_new_privs,
// what allowPrivilegeEscalation: false sets and the Conformance spec expects.
func TestNonewprivsStandin(t *testing.T) {
	out := buildStandins(t, "nonewprivs")
	img, cf := standinImage(t, filepath.Join(out, "nonewprivs.tar"), filepath.Join(out, "layout"), NonewprivsRef)
	if strings.Join(cf.Config.Entrypoint, " ") != "/agnhost" || strings.Join(cf.Config.Cmd, " ") != "nonewprivs" {
		t.Errorf("entrypoint %q cmd %q", cf.Config.Entrypoint, cf.Config.Cmd)
	}
	rc := onlyLayer(t, img)
	defer rc.Close()
	var mode int64 = -1
	eachEntry(t, rc, func(h *tar.Header, _ io.Reader) {
		if h.Name == "agnhost" {
			mode = h.Mode
		}
	})
	if mode != 0o4755 {
		t.Fatalf("/agnhost mode %o, want 4755 (setuid root)", mode)
	}
	if os.Getuid() != 0 {
		t.Skip("running in the unpacked layer needs chroot (root)")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv (util-linux) to set no_new_privs")
	}
	root := filepath.Join(out, "root")
	extractLayer(t, img, root)
	// extractLayer keeps the permission bits only.
	if err := os.Chmod(filepath.Join(root, "agnhost"), 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"chroot", "--userspec=1000:1000", root, "/agnhost", "nonewprivs"}, "Effective uid: 0"},
		{[]string{"setpriv", "--no-new-privs", "chroot", "--userspec=1000:1000", root, "/agnhost", "nonewprivs"}, "Effective uid: 1000"},
	} {
		got, err := exec.CommandContext(ctx, c.args[0], c.args[1:]...).CombinedOutput()
		if err != nil || strings.TrimSpace(string(got)) != c.want {
			t.Errorf("%s: %q (%v), want %q", strings.Join(c.args, " "), got, err, c.want)
		}
	}
}
