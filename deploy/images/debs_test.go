package main

import (
	"archive/tar"
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// agnhostFiles fetches the list's packages (kept in bin/agnhost-debs/ as make images keeps
// them, so a second run downloads nothing) and unpacks them, twice: the same packages must
// give the same files.
func agnhostFiles(t *testing.T) []File {
	t.Helper()
	p := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	debs := testDebs(t, "agnhost", "agnhost-debs.txt", "agnhost-debs")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	files, err := Userland(ctx, debs, p)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Userland(ctx, debs, p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(files, again) {
		t.Error("the same packages gave two userlands")
	}
	return files
}

// testDebs fetches the packages of list for the node's architecture into bin/<cache>/, as the
// image builder keeps them (a second run downloads nothing); it skips without Debian's tools.
func testDebs(t *testing.T, what, list, cache string) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("fetches Debian packages")
	}
	for _, tool := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: the %s userland is built from Debian packages", tool, what)
		}
	}
	arch, err := debArch(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		t.Skip(err)
	}
	names, err := readDebList(list)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	debs, err := fetchDebs(ctx, filepath.Join("..", "..", "bin", cache), arch, names)
	if err != nil {
		t.Fatal(err)
	}
	return debs
}

// extractLayer writes an image's only layer into dir: directories, files and symlinks, with
// the layer's modes.
func extractLayer(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rc := onlyLayer(t, img)
	defer rc.Close()
	eachEntry(t, rc, func(h *tar.Header, r io.Reader) {
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(1795528635, 0)) {
			t.Errorf("%s: uid %d gid %d mtime %s", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		var err error
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(h.Mode&0o777))
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(r); err == nil {
				err = os.WriteFile(p, b, os.FileMode(h.Mode&0o777))
			}
		default:
			t.Fatalf("%s: type %q", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
}

// The agnhost image holds a userland that works: in the unpacked layer (chroot, root only),
// `/bin/sh -c "curl ..."` as the EndpointSlice specs run it gets a real HTTP server's answer on
// loopback, and nc delivers a line to a TCP listener. A userland missing a library fails at
// build time, not in a spec.
func TestAgnhostUserland(t *testing.T) {
	files := agnhostFiles(t)
	t.Run("missing library refused", func(t *testing.T) { missingLibrary(t, files) })
	dir := t.TempDir()
	bin := buildPause(t, dir, runtime.GOARCH)
	spec := Spec{
		Binary: bin, Path: "/agnhost", Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Created: time.Unix(1795528635, 0), User: "0:0", Dirs: []string{"tmp", "uploads"}, Files: files, Env: []string{DefaultPath},
	}
	img, err := Image(spec)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cf.Config.Env, " ") != DefaultPath {
		t.Errorf("env %q", cf.Config.Env)
	}
	if os.Getuid() != 0 {
		t.Skip("running the userland needs chroot (root)")
	}
	root := filepath.Join(dir, "root")
	extractLayer(t, img, root)

	const token = "answered-by-the-test-server"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hostname" {
			fmt.Fprint(w, token)
		}
	}))
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		got <- line
	}()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// As the EndpointSlice and Service specs run them (nc with -v: not busybox's).
	script := fmt.Sprintf(`curl -q -s --max-time 30 %s/hostname && echo && echo line-from-nc | nc -v -t -w 2 %s`,
		srv.URL, strings.Replace(ln.Addr().String(), ":", " ", 1))
	cmd := exec.CommandContext(ctx, "chroot", root, "/bin/sh", "-x", "-c", script)
	cmd.Env = []string{DefaultPath}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chroot /bin/sh -c %q: %v\n%s", script, err, out)
	}
	if !strings.Contains(string(out), token) {
		t.Errorf("curl in the image did not get the server's answer:\n%s", out)
	}
	select {
	case line := <-got:
		if strings.TrimSpace(line) != "line-from-nc" {
			t.Errorf("nc delivered %q", line)
		}
	case <-ctx.Done():
		t.Error("nc delivered nothing")
	}
	t.Run("dig and getent", func(t *testing.T) { digAndGetent(t, root) })
}

// digAndGetent runs, in the unpacked userland (chroot), the DNS specs' probes: dig by UDP and
// TCP with the resolv.conf's search path, dig +short, and getent hosts on /etc/hosts, against
// a DNS server on loopback (resolv.conf names 127.0.0.1; dig -p gives the server's port).
func digAndGetent(t *testing.T, root string) {
	port := serveDNS(t, "probe.example.test.", net.IPv4(192, 0, 2, 10))
	for file, content := range map[string]string{
		"etc/resolv.conf": "nameserver 127.0.0.1\nsearch example.test\noptions ndots:1\n",
		"etc/hosts":       "127.0.0.1 localhost\n192.0.2.20 querier-1.example.test querier-1\n",
	} {
		if err := os.WriteFile(filepath.Join(root, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ns, err := os.ReadFile(filepath.Join(root, "etc", "nsswitch.conf"))
	if err != nil || !regexp.MustCompile(`(?m)^hosts:\s+files dns$`).Match(ns) {
		t.Errorf("/etc/nsswitch.conf (%v):\n%s", err, ns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// As dns_common.go's probers write them, with the server's port; "absent" has no record.
	script := fmt.Sprintf(`dig -v 2>&1
check="$(dig -p %[1]d +notcp +noall +answer +search probe A)" && test -n "$check" && echo "udp: $check"
check="$(dig -p %[1]d +tcp +noall +answer +search probe A)" && test -n "$check" && echo "tcp: $check"
check="$(dig -p %[1]d +notcp +noall +answer +search absent A)" && test -z "$check" && echo "absent: none"
echo "short: $(dig -p %[1]d +short probe.example.test A)"
test -n "$(getent hosts querier-1)" && echo "getent: $(getent hosts querier-1)"`, port)
	cmd := exec.CommandContext(ctx, "chroot", root, "/bin/sh", "-e", "-c", script)
	cmd.Env = []string{DefaultPath}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chroot /bin/sh -c %q: %v\n%s", script, err, out)
	}
	for _, re := range []string{
		`(?m)^DiG 9\.`,
		`(?m)^udp: probe\.example\.test\.\s+30\s+IN\s+A\s+192\.0\.2\.10$`,
		`(?m)^tcp: probe\.example\.test\.\s+30\s+IN\s+A\s+192\.0\.2\.10$`,
		`(?m)^absent: none$`,
		`(?m)^short: 192\.0\.2\.10$`,
		`(?m)^getent: 192\.0\.2\.20\s+querier-1\.example\.test querier-1$`,
	} {
		if !regexp.MustCompile(re).Match(out) {
			t.Errorf("no line matching %s in:\n%s", re, out)
		}
	}
}

func missingLibrary(t *testing.T, files []File) {
	m := map[string]*File{}
	for i := range files {
		f := files[i]
		m[f.Name] = &f
	}
	if err := checkLinked(m); err != nil {
		t.Fatalf("complete userland refused: %v", err)
	}
	removed := 0
	for name := range m {
		if strings.Contains(name, "libcurl.so.4") {
			delete(m, name)
			removed++
		}
	}
	if removed == 0 {
		t.Fatal("no libcurl.so.4 in the userland")
	}
	err := checkLinked(m)
	if err == nil || !strings.Contains(err.Error(), "usr/bin/curl needs libcurl.so.4") {
		t.Errorf("without libcurl: %v", err)
	}
}

func TestDebHelpers(t *testing.T) {
	if got := debVersion("/x/busybox-static_1%3a1.35.0-4+deb12u1+b1_amd64.deb"); got != "busybox-static=1:1.35.0-4+deb12u1+b1" {
		t.Errorf("debVersion: %s", got)
	}
	for name, want := range map[string]bool{
		"usr/share/doc/curl/copyright": false, "usr/share/doc/curl/changelog.Debian.gz": true,
		"usr/share/man/man1/curl.1.gz": true, "usr/bin/curl": false, "usr/share/doc": false,
	} {
		if dropped(name) != want {
			t.Errorf("dropped(%s) = %v", name, !want)
		}
	}
}
