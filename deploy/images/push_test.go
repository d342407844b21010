package main

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// What the release pushes is what was built: every tag resolves to the same index digest,
// with both platforms, in a registry (go-containerregistry's in-memory one).
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	var imgs []v1.Image
	for _, arch := range []string{"amd64", "arm64"} {
		img, err := Image(testSpec(buildPause(t, dir, arch), arch))
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, img)
	}
	idx, err := Index(imgs)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	refs := []string{host + "/kcm-split/x-controller:v1.2.3", host + "/kcm-split/x-controller:1.2.3"}
	if err := push(context.Background(), idx, refs, authn.NewMultiKeychain()); err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Index(r)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		d, _ := got.Digest()
		m, err := got.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if d != want || len(m.Manifests) != 2 {
			t.Errorf("%s: %s with %d manifests, want %s with 2", ref, d, len(m.Manifests), want)
		}
		for _, desc := range m.Manifests {
			img, err := got.Image(desc.Digest)
			if err != nil {
				t.Fatalf("%s %s: %v", ref, desc.Platform, err)
			}
			if _, err := img.Layers(); err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil || cf.Config.User != "65532:65532" {
				t.Errorf("%s %s: config %v, %v", ref, desc.Platform, cf, err)
			}
		}
	}
}
