package main

import (
	"archive/tar"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// buildPause compiles the pause program (a real static binary) once per test binary.
func buildPause(t *testing.T, dir, goarch string) string {
	t.Helper()
	bin := filepath.Join(dir, "pause-"+goarch)
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w", "-o", bin, "./pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOOS=linux", "GOARCH="+goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func testSpec(bin, arch string) Spec {
	return Spec{
		Binary: bin, Path: "/controller", Platform: v1.Platform{OS: "linux", Architecture: arch},
		Created: time.Unix(1795528635, 0),
		Labels:  labels(options{version: "v1.2.3", revision: "abc", source: "https://example.com/src"}, "x-controller", time.Unix(1795528635, 0).UTC()),
	}
}

// The same inputs give the same digests (image, index and the tarball's bytes); another
// version label or another mtime gives another digest.
func TestReproducible(t *testing.T) {
	dir := t.TempDir()
	amd, arm := buildPause(t, dir, "amd64"), buildPause(t, dir, "arm64")
	build := func(mod func(*Spec)) (v1.ImageIndex, []byte) {
		var imgs []v1.Image
		for _, ab := range [][2]string{{"amd64", amd}, {"arm64", arm}} {
			s := testSpec(ab[1], ab[0])
			if mod != nil {
				mod(&s)
			}
			img, err := Image(s)
			if err != nil {
				t.Fatal(err)
			}
			imgs = append(imgs, img)
		}
		idx, err := Index(imgs)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.CreateTemp(dir, "*.tar")
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := WriteArchive(f.Name(), idx, []string{"ghcr.io/kcm-split/x-controller:v1.2.3"}, time.Unix(1795528635, 0)); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		return idx, b
	}
	digest := func(idx v1.ImageIndex) v1.Hash {
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	i1, tar1 := build(nil)
	time.Sleep(1100 * time.Millisecond) // a wall clock leaking into the image would show now
	i2, tar2 := build(nil)
	if digest(i1) != digest(i2) {
		t.Errorf("same inputs, index digests %s and %s", digest(i1), digest(i2))
	}
	if string(tar1) != string(tar2) {
		t.Errorf("same inputs, tarballs differ (%d and %d bytes)", len(tar1), len(tar2))
	}
	i3, _ := build(func(s *Spec) { s.Created = s.Created.Add(time.Second) })
	i4, _ := build(func(s *Spec) { s.Labels["org.opencontainers.image.version"] = "v1.2.4" })
	if d := digest(i3); d == digest(i1) {
		t.Errorf("another epoch, same digest %s", d)
	}
	if d := digest(i4); d == digest(i1) {
		t.Errorf("another version label, same digest %s", d)
	}
}

// An image is what the chart expects and nothing more: user 65532, entrypoint /controller, the
// labels, one layer holding only the binary (no /bin/sh), owned by root, executable.
func TestImageContents(t *testing.T) {
	dir := t.TempDir()
	bin := buildPause(t, dir, "arm64")
	img, err := Image(testSpec(bin, "arm64"))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cf.Config.User)
	}
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != "/controller" {
		t.Errorf("entrypoint %q", cf.Config.Entrypoint)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	if !cf.Created.Equal(time.Unix(1795528635, 0)) {
		t.Errorf("created %s", cf.Created)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.title":    "x-controller",
		"org.opencontainers.image.version":  "v1.2.3",
		"org.opencontainers.image.revision": "abc",
		"org.opencontainers.image.source":   "https://example.com/src",
		"org.opencontainers.image.created":  "2026-11-24T13:57:15Z",
	} {
		if got := cf.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	rc := onlyLayer(t, img)
	defer rc.Close()
	var names []string
	eachEntry(t, rc, func(h *tar.Header, r io.Reader) {
		names = append(names, h.Name)
		if h.Name != "controller" {
			return
		}
		got, _ := io.ReadAll(r)
		if string(got) != string(want) {
			t.Error("the layer's /controller is not the binary")
		}
		if h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time.Unix(1795528635, 0)) {
			t.Errorf("/controller: mode %o uid %d gid %d mtime %s", h.Mode, h.Uid, h.Gid, h.ModTime)
		}
	})
	if strings.Join(names, " ") != "controller" {
		t.Errorf("layer holds %q, want only controller (no shell, nothing else)", names)
	}
}

// The tarball is an OCI layout whose index names each image as containerd's importer reads it,
// one entry per reference, all the same multi-platform index.
func TestArchiveNames(t *testing.T) {
	dir := t.TempDir()
	bin := buildPause(t, dir, "amd64")
	img, err := Image(testSpec(bin, "amd64"))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := Index([]v1.Image{img})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "pause.tar")
	refs := []string{PauseRef, LocalPauseRef}
	if err := WriteArchive(file, idx, refs, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(filepath.Join(dir, "x.tar"), idx, []string{"local/pause:3.10"}, time.Unix(0, 0)); err == nil {
		t.Error("a reference without a registry was accepted (containerd would store it under another name)")
	}
	// Unpack and read it back with go-containerregistry's own layout reader.
	top, m := readArchive(t, file, filepath.Join(dir, "layout"))
	want, _ := idx.Digest()
	if len(m.Manifests) != len(refs) {
		t.Fatalf("index.json has %d entries, want %d", len(m.Manifests), len(refs))
	}
	for i, d := range m.Manifests {
		if d.Digest != want || d.Annotations[annotationContainerdName] != refs[i] {
			t.Errorf("entry %d: %s %v, want %s named %s", i, d.Digest, d.Annotations, want, refs[i])
		}
	}
	got, err := top.ImageIndex(want)
	if err != nil {
		t.Fatal(err)
	}
	im, err := got.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.Architecture != "amd64" {
		b, _ := json.Marshal(im)
		t.Errorf("index %s", b)
	}
}

// readArchive unpacks the tarball file into dir and reads it back with go-containerregistry's
// own layout reader: its top index and that index's manifest (index.json).
func readArchive(t *testing.T, file, dir string) (v1.ImageIndex, *v1.IndexManifest) {
	t.Helper()
	untar(t, file, dir)
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	return top, m
}

// onlyLayer is the uncompressed content of an image's one layer (more or fewer fail the test);
// the caller closes it.
func onlyLayer(t *testing.T, img v1.Image) io.ReadCloser {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %v (%d), want 1", err, len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// eachEntry calls fn with every entry of the tar stream r, in order, and the entry's content.
func eachEntry(t *testing.T, r io.Reader, fn func(h *tar.Header, content io.Reader)) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		fn(h, tr)
	}
}

func untar(t *testing.T, file, dir string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	eachEntry(t, f, func(h *tar.Header, r io.Reader) {
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			return
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	})
}
