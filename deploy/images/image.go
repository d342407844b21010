package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRoot is the user and group every image runs as (distroless' "nonroot"), as the chart's
// securityContext expects.
const NonRoot = 65532

// Annotations containerd's importer reads a name from (an index.json entry names an image).
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// Spec describes one single-binary image for one platform.
type Spec struct {
	// Binary is the file on disk put into the image at Path; empty when the program is one of
	// Files (busybox, from its package).
	Binary string
	// Path is where the binary lands in the image, and the entrypoint ("/controller",
	// "/usr/local/bin/kube-apiserver": parent directories are made, mode 0755).
	Path string
	// NoEntrypoint leaves the config without an entrypoint: Args are the whole default
	// command, which a Pod's command replaces (busybox's ["sh"], as upstream's image has it).
	NoEntrypoint bool
	// Platform the binary was built for.
	Platform v1.Platform
	// Created is the image's creation time and every file's mtime (SOURCE_DATE_EPOCH): the
	// same binary and Created give the same digest.
	Created time.Time
	// Labels end up in the image config (org.opencontainers.image.*).
	Labels map[string]string
	// Args are the default arguments (Cmd) after the entrypoint.
	Args []string
	// User is "uid:gid"; empty means NonRoot:NonRoot.
	User string
	// Dirs are empty directories (mode 1777, like /tmp) the program expects to exist.
	Dirs []string
	// Files are further entries (a userland: Userland), written after Dirs and before the
	// binary, in the order given; parents before their entries.
	Files []File
	// Env is the config's environment (PATH=...); empty for a lone binary.
	Env []string
	// Mode is the binary's mode (permissions and the setuid bit); 0 means 0755.
	Mode int64
}

// Image builds a one-layer OCI image holding spec.Binary and, if given, spec.Dirs and
// spec.Files; a controller's holds the binary alone: no shell, no other file.
func Image(spec Spec) (v1.Image, error) {
	layerTar, err := layerTar(spec)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: spec.Created.UTC()}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: "kcm-split deploy/images: " + spec.Path},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = spec.Platform.Architecture
	cf.OS = spec.Platform.OS
	cf.Variant = spec.Platform.Variant
	cf.Created = created
	user := spec.User
	if user == "" {
		user = strconv.Itoa(NonRoot) + ":" + strconv.Itoa(NonRoot)
	}
	cf.Config = v1.Config{
		User:       user,
		Env:        spec.Env,
		Entrypoint: []string{spec.Path},
		Cmd:        spec.Args,
		WorkingDir: "/",
		Labels:     spec.Labels,
	}
	if spec.NoEntrypoint {
		cf.Config.Entrypoint = nil
	}
	return mutate.ConfigFile(img, cf)
}

// layerTar is the layer: the binary, owned by root (the non-root user cannot rewrite its own
// binary), mode 0755, plus spec.Dirs, spec.Files and the binary's parent directories; every
// entry owned by root with a fixed mtime, nothing else. Without spec.Binary, Dirs and Files
// alone.
func layerTar(spec Spec) ([]byte, error) {
	var b []byte
	if spec.Binary != "" {
		var err error
		if b, err = os.ReadFile(spec.Binary); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := spec.Created.UTC()
	for _, d := range spec.Dirs {
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir, Name: strings.Trim(d, "/") + "/", Mode: 0o1777, ModTime: mtime, Format: tar.FormatPAX,
		}); err != nil {
			return nil, err
		}
	}
	for _, f := range spec.Files {
		h := &tar.Header{Typeflag: f.Type, Name: f.Name, Mode: f.Mode, ModTime: mtime, Format: tar.FormatPAX}
		switch f.Type {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeSymlink:
			h.Linkname = f.Linkname
		case tar.TypeReg:
			h.Size = int64(len(f.Data))
		default:
			return nil, fmt.Errorf("%s: tar entry type %q not supported", f.Name, f.Type)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if spec.Binary == "" {
		if err := tw.Close(); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	// The binary's parent directories (usr/local/bin/) that no entry above made, mode 0755.
	have := map[string]bool{}
	for _, d := range spec.Dirs {
		have[strings.Trim(d, "/")] = true
	}
	for _, f := range spec.Files {
		have[f.Name] = true
	}
	parts := strings.Split(strings.Trim(spec.Path, "/"), "/")
	for i := 1; i < len(parts); i++ {
		d := strings.Join(parts[:i], "/")
		if have[d] {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX,
		}); err != nil {
			return nil, err
		}
	}
	mode := spec.Mode
	if mode == 0 {
		mode = 0o755
	}
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: strings.TrimLeft(spec.Path, "/"), Size: int64(len(b)), Mode: mode,
		ModTime: mtime, Format: tar.FormatPAX,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(b); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Index is the multi-platform image: an OCI image index over one image per platform.
func Index(imgs []v1.Image) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, img := range imgs {
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			MediaType: types.OCIManifestSchema1,
			Platform:  &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant},
		}})
	}
	return mutate.AppendManifests(idx, adds...), nil
}

// WriteArchive writes idx as an OCI image layout in a tar file, with one index.json entry per
// reference, each annotated with the name containerd's `ctr images import` gives the image
// (io.containerd.image.name) and the tag (org.opencontainers.image.ref.name). The tar itself is
// reproducible: sorted entries, fixed mtimes and owners.
func WriteArchive(file string, idx v1.ImageIndex, refs []string, mtime time.Time) error {
	dir, err := os.MkdirTemp(filepath.Dir(file), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	for _, ref := range refs {
		// containerd stores the name as written ("docker.io/local/x:1"), so refs must be
		// fully qualified; go-containerregistry would spell docker.io as index.docker.io.
		t, err := name.NewTag(ref, name.StrictValidation)
		if err != nil {
			return err
		}
		if !strings.Contains(strings.SplitN(ref, "/", 2)[0], ".") {
			return fmt.Errorf("image reference %q: name the registry (docker.io/..., ghcr.io/...)", ref)
		}
		if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
			annotationContainerdName: ref,
			annotationRefName:        t.TagStr(),
		})); err != nil {
			return err
		}
	}
	tmp := file + ".tmp"
	if err := tarDir(tmp, dir, mtime); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, file)
}

// tarDir packs a directory into a tar file reproducibly (go-containerregistry writes an OCI
// layout only as a directory, and archive/tar has no "add this tree" helper).
func tarDir(file, dir string, mtime time.Time) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	for _, p := range paths {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime.UTC(), Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, fi.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		_, err = io.Copy(tw, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
