package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// make images' busybox image, from Debian's busybox-static: named as e2e.test asks, root, `sh`
// as its command and no entrypoint, every applet a link in /bin, /tmp, root and nobody in
// /etc/passwd and /etc/group. Unpacked and run in a chroot (root), its shell behaves as the
// specs expect of busybox's: it exits with `exit`'s status, exits at once when run with no
// command and no input (a Job's Pod, an init container), says "can't create" on a read-only
// root filesystem; /bin/sysctl reads a sysctl. By default the image holds the package's own
// binary (no source, no compiler). The binary rebuilt with FEATURE_DI_ENV_HACK
// (-busybox-from-source, the conformance rig's), whose sh keeps an environment variable whose
// name is no shell name (a-b, data-1), is tested when BUSYBOX_FROM_SOURCE=1 asks for it (a
// build: apt-get source, make, a C compiler) or when the build directory (BUSYBOX_BUILD_DIR,
// default bin/busybox-build/) already keeps it; otherwise that assertion is skipped.
func TestBusyboxImage(t *testing.T) {
	debs := testDebs(t, "busybox", "busybox-debs.txt", "agnhost-debs")
	p := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := os.Getenv("BUSYBOX_BUILD_DIR")
	if build == "" {
		build = filepath.Join("..", "..", "bin", "busybox-build")
	}
	kept, err := keptBusybox(ctx, debs, p, build)
	if err != nil {
		t.Fatal(err)
	}
	_, statErr := os.Stat(kept)
	fromSource := os.Getenv("BUSYBOX_FROM_SOURCE") == "1" || statErr == nil
	// The package's own binary, which the default image holds.
	pkgFiles, err := BusyboxUserland(ctx, debs, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := busyboxData(t, pkgFiles)
	if fromSource {
		bin, note, err := busyboxBinary(ctx, debs, p, build)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(note, diEnvOn) {
			t.Errorf("note %q", note)
		}
		if bytes.Equal(bin, want) {
			t.Error("the rebuilt binary is the package's")
		}
		want = bin
	}
	files, err := BusyboxUserland(ctx, debs, p, nilUnless(fromSource, want))
	if err != nil {
		t.Fatal(err)
	}
	again, err := BusyboxUserland(ctx, debs, p, nilUnless(fromSource, want))
	if err != nil || !reflect.DeepEqual(files, again) {
		t.Errorf("the same package gave two layers (%v)", err)
	}
	if !bytes.Equal(busyboxData(t, files), want) {
		t.Error("the layer's /bin/busybox is not the binary given")
	}
	out := buildStandins(t, "busybox", func(o *options) {
		o.busyboxFromSource, o.busyboxBuildDir = fromSource, build
	})
	img, cf := standinImage(t, filepath.Join(out, "busybox.tar"), filepath.Join(out, "layout"), BusyboxRef)
	if cf.Config.Entrypoint != nil || !reflect.DeepEqual(cf.Config.Cmd, []string{"sh"}) || cf.Config.User != "0:0" ||
		strings.Join(cf.Config.Env, " ") != DefaultPath || cf.Config.WorkingDir != "/" {
		t.Errorf("config: entrypoint %q cmd %q user %q env %q workdir %q", cf.Config.Entrypoint, cf.Config.Cmd,
			cf.Config.User, cf.Config.Env, cf.Config.WorkingDir)
	}
	if l := cf.Config.Labels["io.kcm-split.debian-packages"]; !strings.HasPrefix(l, "busybox-static=") || strings.Contains(l, diEnvOn) != fromSource {
		t.Errorf("labels %v (rebuilt from source: %v)", cf.Config.Labels, fromSource)
	}
	busyboxLayer(t, img, want, fromSource)
	if os.Getuid() != 0 {
		t.Skip("running the image's shell needs chroot (root)")
	}
	root := filepath.Join(out, "root")
	extractLayer(t, img, root)
	busyboxShell(t, root)
	t.Run("env names like a-b", func(t *testing.T) {
		if !fromSource {
			t.Skipf("the package's own binary drops a-b and data-1; the rebuilt one keeps them: BUSYBOX_FROM_SOURCE=1 builds it (apt-get source, make, cc), or keep it in %s (make images IMAGES_FLAGS=-busybox-from-source)", kept)
		}
		busyboxEnvNames(t, root)
	})
	t.Run("read-only root and sysctl", func(t *testing.T) { busyboxNamespaced(t, root) })
}

// busyboxLayer checks the image's layer: /bin/busybox is want, every applet the specs run a
// link to it in /bin, /tmp, /root, root and nobody in /etc/passwd and /etc/group, nothing in
// /sbin or /usr/bin, no manuals.
func busyboxLayer(t *testing.T, img v1.Image, want []byte, fromSource bool) {
	t.Helper()
	entries := map[string]*tar.Header{}
	data := map[string]string{}
	rc := onlyLayer(t, img)
	eachEntry(t, rc, func(h *tar.Header, r io.Reader) {
		entries[h.Name] = h
		if b, err := io.ReadAll(r); err == nil && h.Typeflag == tar.TypeReg && (strings.HasPrefix(h.Name, "etc/") || h.Name == "bin/busybox") {
			data[h.Name] = string(b)
		}
	})
	rc.Close()
	if h := entries["bin/busybox"]; h == nil || h.Typeflag != tar.TypeReg || h.Mode != 0o755 {
		t.Fatalf("bin/busybox: %+v", h)
	}
	if data["bin/busybox"] != string(want) {
		t.Errorf("the image's bin/busybox is not the %s binary", map[bool]string{false: "package's", true: "rebuilt"}[fromSource])
	}
	for _, a := range []string{"sh", "sysctl", "env", "sleep", "cat", "ls", "wget", "nslookup", "true", "false", "echo", "test", "ping", "hostname", "id", "["} {
		if h := entries["bin/"+a]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
			t.Errorf("bin/%s: %+v, want a link to busybox", a, h)
		}
	}
	if h := entries["tmp/"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("tmp/: %+v", h)
	}
	if h := entries["root/"]; h == nil || h.Mode != 0o700 {
		t.Errorf("root/: %+v", h)
	}
	for _, f := range []struct{ name, line string }{
		{"etc/passwd", "root:x:0:0:"}, {"etc/passwd", "nobody:x:65534:65534:"},
		{"etc/group", "root:x:0:"}, {"etc/group", "nobody:x:65534:"},
	} {
		if !strings.Contains(data[f.name], "\n"+f.line) && !strings.HasPrefix(data[f.name], f.line) {
			t.Errorf("%s lacks %q:\n%s", f.name, f.line, data[f.name])
		}
	}
	for name := range entries {
		if strings.HasPrefix(name, "sbin/") || strings.HasPrefix(name, "usr/bin/") || strings.HasPrefix(name, "usr/share/man/") {
			t.Errorf("%s: the applets belong in /bin, manuals nowhere", name)
		}
	}
}

// busyboxData is the content of /bin/busybox among files.
func busyboxData(t *testing.T, files []File) []byte {
	t.Helper()
	for _, f := range files {
		if f.Name == "bin/busybox" {
			return f.Data
		}
	}
	t.Fatal("no bin/busybox")
	return nil
}

// nilUnless is b if ok, else nil.
func nilUnless(ok bool, b []byte) []byte {
	if ok {
		return b
	}
	return nil
}

// chrootRun runs args in a chroot of root with env (and PATH), returning the output and the
// exit code.
func chrootRun(ctx context.Context, t *testing.T, root string, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "chroot", append([]string{root}, args...)...)
	cmd.Env = append([]string{DefaultPath}, env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("chroot %s: %v", strings.Join(args, " "), err)
	}
	return string(out), 0
}

// busyboxEnvNames runs `sh -c env` in the rebuilt image, as the ConfigMap and Secret specs do
// with envFrom's names (data-1, p-data-1, 1-data-1): upstream's busybox keeps them for its
// children, and so does the rebuilt binary (Debian's own would drop them).
func busyboxEnvNames(t *testing.T, root string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, code := chrootRun(ctx, t, root, []string{"a-b=kept", "1-data-1=value-1", "ab_1=kept"}, "sh", "-c", "env")
	if code != 0 || !hasLine(out, "a-b=kept") || !hasLine(out, "1-data-1=value-1") || !hasLine(out, "ab_1=kept") {
		t.Errorf("sh -c env: exit %d, want a-b=kept, 1-data-1=value-1 and ab_1=kept in:\n%s", code, out)
	}
}

// busyboxShell runs the shell of the unpacked image in a chroot: env passes ab_1 on, exit 3 is
// 3, and the image's command alone (sh, no input) ends at once, successfully.
func busyboxShell(t *testing.T, root string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(env []string, args ...string) (string, int) { return chrootRun(ctx, t, root, env, args...) }
	if out, code := run([]string{"ab_1=kept"}, "sh", "-c", "env"); code != 0 || !hasLine(out, "ab_1=kept") {
		t.Errorf("sh -c env: exit %d, want ab_1=kept in:\n%s", code, out)
	}
	if out, code := run(nil, "sh", "-c", "exit 3"); code != 3 {
		t.Errorf("sh -c 'exit 3': exit %d (%s), want 3", code, out)
	}
	if out, code := run(nil, "/bin/sh", "-c", "echo $0; test -d /tmp && id -u"); code != 0 || out != "/bin/sh\n0\n" {
		t.Errorf("sh -c 'echo $0; ...': exit %d %q", code, out)
	}
	// A Job's Pod with no command runs the image's Cmd: sh, with no input, exits 0.
	start := time.Now()
	if out, code := run(nil, "sh"); code != 0 || time.Since(start) > 10*time.Second {
		t.Errorf("sh with no input: exit %d after %s (%s)", code, time.Since(start), out)
	}
	if out, code := run(nil, "false"); code != 1 {
		t.Errorf("false: exit %d (%s)", code, out)
	}
}

// hasLine reports whether out has line as one of its lines.
func hasLine(out, line string) bool {
	for _, l := range strings.Split(out, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// busyboxNamespaced runs the image's programs in a chroot inside new mount and UTS namespaces
// (unshare; nothing leaks to the host): /bin/sysctl reads the namespace's kernel.hostname
// through the host's /proc bound in, and on the root made read-only, as the kubelet's
// readOnlyRootFilesystem makes it, the shell's redirect fails with busybox's message.
func busyboxNamespaced(t *testing.T, root string) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare (util-linux)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const host = "busybox-sysctl-test"
	script := fmt.Sprintf(`set -e
hostname %[2]s
mkdir -p %[1]s/proc
mount --bind /proc %[1]s/proc
chroot %[1]s /bin/sysctl kernel.hostname
chroot %[1]s /bin/sysctl -n kernel/hostname
mount --bind %[1]s %[1]s
mount -o remount,ro,bind %[1]s
chroot %[1]s /bin/sh -c 'echo test > /file' 2>&1 || echo "exit $?"
`, root, host)
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--uts", "--propagation", "private", "/bin/sh", "-c", script)
	cmd.Env = []string{DefaultPath}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unshare: %v\n%s", err, out)
	}
	want := "kernel.hostname = " + host + "\n" + host + "\n/bin/sh: can't create /file: Read-only file system\nexit 1\n"
	if string(out) != want {
		t.Errorf("got:\n%s\nwant:\n%s", out, want)
	}
}
