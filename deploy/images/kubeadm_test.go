package main

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const testEpoch = 1795528635

// versionStub builds testdata/versionstub for goarch as dir/name, saying line to any flag.
func versionStub(t *testing.T, dir, name, goarch, line string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -X 'main.says="+line+"'", "-o", bin, "./testdata/versionstub")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOOS=linux", "GOARCH="+goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// stubKubeadmDir is a -kubeadm directory of stand-ins that print the versions the builder
// wants (the real binaries' answers are TestKubeadmRealBinaries').
func stubKubeadmDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, k := range kubeadmImages {
		versionStub(t, dir, k.bin, runtime.GOARCH, k.versionOut)
	}
	return dir
}

// The set is kubeadm v1.36.3's list, name for name: checked against kubeadm itself when
// bin/kubeadm is built (make tools).
func TestKubeadmNames(t *testing.T) {
	ts, err := kubeadmTargets("../..", stubKubeadmDir(t), v1.Platform{OS: "linux", Architecture: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, tg := range ts {
		if len(tg.refs) != 1 {
			t.Errorf("%s: refs %q, want one name", tg.name, tg.refs)
		}
		refs = append(refs, tg.refs...)
	}
	want := []string{
		"registry.k8s.io/kube-apiserver:v1.36.3", "registry.k8s.io/kube-controller-manager:v1.36.3",
		"registry.k8s.io/kube-scheduler:v1.36.3", "registry.k8s.io/kube-proxy:v1.36.3",
		"registry.k8s.io/etcd:3.6.8-0", "registry.k8s.io/coredns/coredns:v1.14.2", "registry.k8s.io/pause:3.10.2",
	}
	slices.Sort(refs)
	slices.Sort(want)
	if !reflect.DeepEqual(refs, want) {
		t.Errorf("names %q, want %q", refs, want)
	}
	kubeadm, err := filepath.Abs("../../bin/kubeadm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(kubeadm); err != nil {
		t.Skip("no bin/kubeadm (make tools): not compared with kubeadm's own list")
	}
	out, err := exec.Command(kubeadm, "config", "images", "list", "--kubernetes-version", KubeadmVersion).Output()
	if err != nil {
		t.Fatalf("kubeadm config images list: %v", err)
	}
	listed := strings.Fields(string(out))
	slices.Sort(listed)
	if !reflect.DeepEqual(refs, listed) {
		t.Errorf("kubeadm lists %q, the builder makes %q", listed, refs)
	}
}

// A binary of another architecture or of another release is refused, and a missing one named.
func TestKubeadmRefusals(t *testing.T) {
	node := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	dir := stubKubeadmDir(t)
	versionStub(t, dir, "etcd", other, "etcd Version: 3.6.8")
	if _, err := kubeadmTargets("../..", dir, node); err == nil || !strings.Contains(err.Error(), "is a "+other+" binary") {
		t.Errorf("an %s etcd for a %s image: %v", other, runtime.GOARCH, err)
	}
	os.Remove(filepath.Join(dir, "etcd"))
	if _, err := kubeadmTargets("../..", dir, node); err == nil || !strings.Contains(err.Error(), `TOOLS_ONLY="etcd"`) {
		t.Errorf("no etcd: %v", err)
	}
	versionStub(t, dir, "etcd", runtime.GOARCH, "etcd Version: 3.6.7")
	ts, err := kubeadmTargets("../..", dir, node)
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range ts {
		err := checkVersion(context.Background(), tg)
		if tg.name == "etcd" {
			if err == nil || !strings.Contains(err.Error(), `want "etcd Version: 3.6.8"`) {
				t.Errorf("etcd 3.6.7 as %s: %v", KubeadmEtcdRef, err)
			}
		} else if err != nil {
			t.Errorf("%s: %v", tg.name, err)
		}
	}
}

// The real binaries of bin/ (make kubeadm-images builds them) are the releases kubeadm names.
func TestKubeadmRealBinaries(t *testing.T) {
	node := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	for _, k := range kubeadmImages {
		bin, _ := filepath.Abs(filepath.Join("../../bin", k.bin))
		if _, err := os.Stat(bin); err != nil {
			t.Logf("no bin/%s: not checked", k.bin)
			continue
		}
		tg := target{name: k.bin, prebuilt: bin, refs: []string{k.ref}, platforms: []v1.Platform{node}, versionArgs: k.versionArgs, versionOut: k.versionOut}
		if err := checkArch(bin, node); err != nil {
			t.Error(err)
		}
		if err := checkVersion(context.Background(), tg); err != nil {
			t.Error(err)
		}
	}
}

// readLayout unpacks an image tarball and returns its one image (node platform) and the
// names its index.json gives it.
func readLayout(t *testing.T, file string) (v1.Image, []string) {
	t.Helper()
	top, m := readArchive(t, file, t.TempDir())
	var names []string
	for _, d := range m.Manifests {
		names = append(names, d.Annotations[annotationContainerdName])
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%s: %d platforms, want the node's", file, len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img, names
}

// layerEntries lists an image's layer: name -> header.
func layerEntries(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := onlyLayer(t, img)
	defer rc.Close()
	out := map[string]*tar.Header{}
	eachEntry(t, rc, func(h *tar.Header, _ io.Reader) { out[strings.TrimSuffix(h.Name, "/")] = h })
	return out
}

// The builder's -kubeadm mode (kube-proxy aside: TestKubeProxyIptables) writes each image as
// kubeadm's manifests run it: the name, root, PATH, the binary where the manifest's command
// finds it (run by that name in the unpacked layer, as root), CoreDNS's entrypoint for args
// alone; the same inputs give the same tarballs.
//
// Over 80 lines: one build checked image by image, then rebuilt for reproducibility.
func TestKubeadmImages(t *testing.T) {
	bins := stubKubeadmDir(t)
	build := func(out string) {
		o := options{
			root: "../..", out: out, version: "v9.9.9", revision: "abc", source: "https://example.com/src",
			platforms: "linux/amd64", nodePlatform: "linux/" + runtime.GOARCH, kubeadm: bins, iptables: "nft",
			only: "kube-apiserver,kube-controller-manager,kube-scheduler,etcd,coredns,pause", epoch: testEpoch,
		}
		if err := run(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	build(out)
	// As kubeadm init --dry-run writes them: the static Pods' command, CoreDNS's args.
	for _, c := range []struct{ file, ref, entry, run, version string }{
		{"kube-apiserver", KubeAPIServerRef, "/usr/local/bin/kube-apiserver", "kube-apiserver", "v1.36.3"},
		{"kube-controller-manager", KubeControllerRef, "/usr/local/bin/kube-controller-manager", "kube-controller-manager", "v1.36.3"},
		{"kube-scheduler", KubeSchedulerRef, "/usr/local/bin/kube-scheduler", "kube-scheduler", "v1.36.3"},
		{"etcd", KubeadmEtcdRef, "/usr/local/bin/etcd", "etcd", "3.6.8-0"},
		{"coredns", KubeadmCoreDNSRef, "/coredns", "/coredns", "v1.14.2"},
		{"pause", PauseRef, "/pause", "", "v9.9.9"},
	} {
		t.Run(c.file, func(t *testing.T) {
			img, names := readLayout(t, filepath.Join(out, c.file+".tar"))
			if !reflect.DeepEqual(names, []string{c.ref}) {
				t.Errorf("names %q, want %s", names, c.ref)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cf.Config.Entrypoint, []string{c.entry}) || len(cf.Config.Cmd) != 0 {
				t.Errorf("entrypoint %q cmd %q, want [%s] and no cmd", cf.Config.Entrypoint, cf.Config.Cmd, c.entry)
			}
			if got := cf.Config.Labels["org.opencontainers.image.version"]; got != c.version {
				t.Errorf("version label %q, want %s", got, c.version)
			}
			if cf.Architecture != runtime.GOARCH || !cf.Created.Equal(time.Unix(testEpoch, 0)) {
				t.Errorf("arch %s created %s", cf.Architecture, cf.Created)
			}
			if c.file == "pause" {
				return // as make images builds it (TestArchiveNames, TestPauseStopsOnSignal)
			}
			if cf.Config.User != "0:0" || !reflect.DeepEqual(cf.Config.Env, []string{DefaultPath}) {
				t.Errorf("user %q env %q, want 0:0 and %s", cf.Config.User, cf.Config.Env, DefaultPath)
			}
			entries := layerEntries(t, img)
			var names2 []string
			for n, h := range entries {
				names2 = append(names2, n)
				if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(testEpoch, 0)) {
					t.Errorf("%s: uid %d gid %d mtime %s", n, h.Uid, h.Gid, h.ModTime)
				}
			}
			slices.Sort(names2)
			want := []string{"coredns", "tmp"}
			if c.file != "coredns" {
				want = []string{"tmp", "usr", "usr/local", "usr/local/bin", "usr/local/bin/" + c.file}
			}
			if !reflect.DeepEqual(names2, want) {
				t.Errorf("layer %q, want %q", names2, want)
			}
			if h := entries[strings.TrimPrefix(c.entry, "/")]; h == nil || h.Mode != 0o755 {
				t.Errorf("%s not mode 0755: %+v", c.entry, h)
			}
			if os.Getuid() != 0 {
				t.Skip("running the binary by its manifest's name needs chroot (root)")
			}
			root := filepath.Join(t.TempDir(), "root")
			extractLayer(t, img, root)
			cmd := exec.Command("chroot", root, c.run, "--version")
			cmd.Env = cf.Config.Env // the runtime looks the command up on the image's PATH
			got, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("chroot %s: %v\n%s", c.run, err, got)
			}
			k := kubeadmImages[slices.IndexFunc(kubeadmImages, func(k kubeadmImage) bool { return k.bin == c.file })]
			if strings.TrimSpace(string(got)) != k.versionOut {
				t.Errorf("%s in the image says %q", c.run, got)
			}
		})
	}
	again := t.TempDir()
	build(again)
	for _, f := range []string{"kube-apiserver", "etcd", "coredns", "pause"} {
		a, _ := os.ReadFile(filepath.Join(out, f+".tar"))
		b, _ := os.ReadFile(filepath.Join(again, f+".tar"))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s.tar: two builds of the same inputs differ (%d and %d bytes)", f, len(a), len(b))
		}
	}
}

// kubeProxyDebs fetches kube-proxy-debs.txt's packages, kept in bin/kube-proxy-debs/ as make
// kubeadm-images keeps them.
func kubeProxyDebs(t *testing.T) []string {
	t.Helper()
	return testDebs(t, "kube-proxy", "kube-proxy-debs.txt", "kube-proxy-debs")
}

// The kube-proxy image's iptables works: in the unpacked layer (chroot, root only), in a
// network namespace of its own, iptables reports the nf_tables backend, creates a chain,
// iptables-restore --noflush adds a rule to it as kube-proxy's sync does, iptables-save and
// ip6tables-save print them back, nft sees the table iptables made, and conntrack runs. The
// alternatives links lead where -iptables-backend says.
//
// Over 80 lines: one userland, checked in files, then run.
func TestKubeProxyIptables(t *testing.T) {
	debs := kubeProxyDebs(t)
	ctx := context.Background()
	files, err := KubeProxyUserland(ctx, debs, "nft")
	if err != nil {
		t.Fatal(err)
	}
	again, err := KubeProxyUserland(ctx, debs, "nft")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(files, again) {
		t.Error("the same packages gave two userlands")
	}
	legacy, err := KubeProxyUserland(ctx, debs, "legacy")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		files []File
		want  string
	}{{files, "usr/sbin/xtables-nft-multi"}, {legacy, "usr/sbin/xtables-legacy-multi"}} {
		m := map[string]*File{}
		for i := range c.files {
			m[c.files[i].Name] = &c.files[i]
		}
		for _, cmd := range []string{"iptables", "iptables-restore", "ip6tables-save"} {
			f, ok := resolve(m, "usr/sbin/"+cmd)
			if !ok || f.Data == nil || !bytes.Equal(f.Data, m[c.want].Data) {
				t.Errorf("/usr/sbin/%s does not lead to %s", cmd, c.want)
			}
		}
	}
	if _, err := KubeProxyUserland(ctx, debs, "iptables"); err == nil {
		t.Error("backend \"iptables\" accepted")
	}

	dir := t.TempDir()
	bin := versionStub(t, dir, "kube-proxy", runtime.GOARCH, "Kubernetes "+KubeadmVersion)
	img, err := Image(Spec{
		Binary: bin, Path: "/usr/local/bin/kube-proxy", Platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Created: time.Unix(testEpoch, 0), User: "0:0", Dirs: []string{"tmp"}, Files: files, Env: []string{DefaultPath},
	})
	if err != nil {
		t.Fatal(err)
	}
	if os.Getuid() != 0 {
		t.Skip("running iptables in the image needs chroot and a network namespace (root)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare (util-linux)")
	}
	root := filepath.Join(dir, "root")
	extractLayer(t, img, root)
	// Each command in the image; all in one new network namespace, so the host's rules are
	// neither read nor touched.
	script := `set -e
c() { chroot "$ROOT" "$@"; }
c /usr/local/bin/kube-proxy --version
c iptables -V
c iptables -w 5 -t nat -N KCM-SPLIT-TEST
printf '*nat\n:KCM-SPLIT-SVC - [0:0]\n-A KCM-SPLIT-TEST -p tcp -d 10.96.0.10/32 --dport 53 -j KCM-SPLIT-SVC\nCOMMIT\n' | c iptables-restore -w 5 --noflush --counters
c iptables-save -t nat
c ip6tables -w 5 -t filter -N KCM-SPLIT-TEST6
c ip6tables-save -t filter
c nft list tables
c conntrack --version
`
	cmd := exec.Command("unshare", "--net", "--", "/bin/sh", "-c", script)
	cmd.Env = []string{DefaultPath, "ROOT=" + root}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unshare --net sh -c ...: %v\n%s", err, out)
	}
	for _, want := range []string{
		"Kubernetes " + KubeadmVersion, "iptables v1.8.9 (nf_tables)", ":KCM-SPLIT-TEST - [0:0]",
		"-A KCM-SPLIT-TEST -d 10.96.0.10/32 -p tcp -m tcp --dport 53 -j KCM-SPLIT-SVC",
		":KCM-SPLIT-TEST6 - [0:0]", "table ip nat", "table ip6 filter", "conntrack v",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}
