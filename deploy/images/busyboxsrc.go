package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Debian's busybox drops environment variables whose names are no shell names (data-1) when
// its sh starts: Debian reverts upstream's change that keeps them (for the installer's
// preseeding) and puts it back behind its own option, FEATURE_DI_ENV_HACK, which only its
// installer build sets. Upstream's e2e busybox image keeps them, and four Conformance specs
// read them (`sh -c env` with envFrom prefixes). With -busybox-from-source (the conformance
// rig asks for it) the busybox image's binary is therefore Debian's own source package of the
// busybox-static in the list, built with Debian's static configuration and that one option
// set; by default it is the package's binary (no source fetch, no compiler).

// The line the rebuild changes in Debian's static configuration, and what it becomes.
const (
	diEnvOff = "# CONFIG_FEATURE_DI_ENV_HACK is not set"
	diEnvOn  = "CONFIG_FEATURE_DI_ENV_HACK=y"
)

// busyboxBinary is rebuiltBusybox of the busybox-static package among debs, for p.
func busyboxBinary(ctx context.Context, debs []string, p v1.Platform, cacheDir string) ([]byte, string, error) {
	arch, err := debArch(p)
	if err != nil {
		return nil, "", err
	}
	deb, err := busyboxDeb(debs)
	if err != nil {
		return nil, "", err
	}
	return rebuiltBusybox(ctx, deb, arch, cacheDir)
}

// keptBusybox is the file in cacheDir where rebuiltBusybox keeps the binary it builds from the
// source of the busybox-static package among debs, for p; it may not exist yet.
func keptBusybox(ctx context.Context, debs []string, p v1.Platform, cacheDir string) (string, error) {
	arch, err := debArch(p)
	if err != nil {
		return "", err
	}
	deb, err := busyboxDeb(debs)
	if err != nil {
		return "", err
	}
	src, version, err := debSource(ctx, deb)
	if err != nil {
		return "", err
	}
	return keptName(cacheDir, src, version, arch), nil
}

// busyboxDeb is the busybox-static package among debs.
func busyboxDeb(debs []string) (string, error) {
	for _, d := range debs {
		if strings.HasPrefix(filepath.Base(d), "busybox-static_") {
			return d, nil
		}
	}
	return "", errors.New("no busybox-static among the busybox image's packages")
}

// keptName is the file in cacheDir that keeps the binary rebuilt from source src=version for
// arch.
func keptName(cacheDir, src, version, arch string) string {
	return filepath.Join(cacheDir, src+"_"+url.PathEscape(version)+"_"+arch+"_di-env")
}

// debSource is the source package name and version of a binary .deb (dpkg-deb's Source
// field, whose version may differ from the binary's: a binNMU's "+b1").
func debSource(ctx context.Context, deb string) (string, string, error) {
	out, err := exec.CommandContext(ctx, "dpkg-deb", "-f", deb, "Package", "Version", "Source").Output()
	if err != nil {
		return "", "", fmt.Errorf("dpkg-deb -f %s: %w", deb, err)
	}
	f := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			f[k] = strings.TrimSpace(v)
		}
	}
	name, version := f["Package"], f["Version"]
	if src := f["Source"]; src != "" {
		n, v, ok := strings.Cut(src, " (")
		name = n
		if ok {
			version = strings.TrimSuffix(v, ")")
		}
	}
	if name == "" || version == "" {
		return "", "", fmt.Errorf("%s: no package name or version in %q", deb, out)
	}
	return name, version, nil
}

// rebuiltBusybox is the busybox binary built from the source package of deb (Debian's
// busybox-static) with Debian's static configuration and FEATURE_DI_ENV_HACK set, and a note
// saying so for the image's label. It is kept in cacheDir, one file per source version and
// architecture, and built only when missing (the kept file keeps the digest): the source
// comes from the deb-src side of the package lists apt already uses (`apt-get source`, in a
// private apt state under cacheDir), and the build needs dpkg-source, make and a C compiler
// with glibc's static libraries.
func rebuiltBusybox(ctx context.Context, deb, arch, cacheDir string) ([]byte, string, error) {
	src, version, err := debSource(ctx, deb)
	if err != nil {
		return nil, "", err
	}
	note := fmt.Sprintf("(binary rebuilt from source %s=%s with %s)", src, version, diEnvOn)
	cached := keptName(cacheDir, src, version, arch)
	if b, err := os.ReadFile(cached); err == nil {
		return b, note, nil
	}
	if cacheDir, err = filepath.Abs(cacheDir); err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, "", err
	}
	work, err := os.MkdirTemp(cacheDir, ".build-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(work)
	dsc, err := fetchSource(ctx, work, src, version)
	if err != nil {
		return nil, "", err
	}
	tree := filepath.Join(work, "tree")
	if err := runIn(ctx, work, nil, "dpkg-source", "-x", dsc, tree); err != nil {
		return nil, "", err
	}
	cfg, err := os.ReadFile(filepath.Join(tree, "debian", "config", "pkg", "static"))
	if err != nil {
		return nil, "", fmt.Errorf("the source's static busybox configuration: %w", err)
	}
	if !bytes.Contains(cfg, []byte(diEnvOff+"\n")) {
		return nil, "", fmt.Errorf("%s=%s: its static configuration has no %q line", src, version, diEnvOff)
	}
	cfg = bytes.Replace(cfg, []byte(diEnvOff+"\n"), []byte(diEnvOn+"\n"), 1)
	if err := os.WriteFile(filepath.Join(tree, ".config"), cfg, 0o644); err != nil {
		return nil, "", err
	}
	// oldconfig asks nothing of a complete configuration; the newlines take the defaults
	// should a version add an option.
	if err := runIn(ctx, tree, strings.NewReader(strings.Repeat("\n", 500)), "make", "oldconfig"); err != nil {
		return nil, "", err
	}
	if err := runIn(ctx, tree, nil, "make", "-j2", "busybox"); err != nil {
		return nil, "", err
	}
	b, err := os.ReadFile(filepath.Join(tree, "busybox"))
	if err != nil {
		return nil, "", err
	}
	tmp := cached + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return nil, "", err
	}
	return b, note, os.Rename(tmp, cached)
}

// fetchSource downloads the source package src=version into dir with apt-get, from the deb-src
// side of the repositories apt's own lists name (a private state in dir: the machine's apt
// configuration is left alone), and returns its .dsc file.
func fetchSource(ctx context.Context, dir, src, version string) (string, error) {
	out, err := exec.CommandContext(ctx, "apt-get", "indextargets", "--format", "$(REPO_URI) $(RELEASE) $(COMPONENT)", "Identifier: Packages").Output()
	if err != nil {
		return "", fmt.Errorf("apt-get indextargets: %w", err)
	}
	seen := map[string]bool{}
	var list strings.Builder
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) == 3 && !seen[l] {
			seen[l] = true
			fmt.Fprintf(&list, "deb-src %s %s %s\n", f[0], f[1], f[2])
		}
	}
	if list.Len() == 0 {
		return "", errors.New("apt names no repository (apt-get indextargets): run apt-get update")
	}
	for _, d := range []string{"parts", "lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(dir, "apt", d), 0o755); err != nil {
			return "", err
		}
	}
	sources := filepath.Join(dir, "apt", "sources.list")
	if err := os.WriteFile(sources, []byte(list.String()), 0o644); err != nil {
		return "", err
	}
	opts := []string{
		"-o", "Dir::Etc::SourceList=" + sources, "-o", "Dir::Etc::SourceParts=" + filepath.Join(dir, "apt", "parts"),
		"-o", "Dir::State::Lists=" + filepath.Join(dir, "apt", "lists"), "-o", "Dir::Cache=" + filepath.Join(dir, "apt", "cache"),
	}
	if err := aptGet(ctx, dir, append(opts, "update", "-q")...); err != nil {
		return "", err
	}
	if err := aptGet(ctx, dir, append(opts, "source", "--download-only", "-q", src+"="+version)...); err != nil {
		return "", err
	}
	dscs, err := filepath.Glob(filepath.Join(dir, src+"_*.dsc"))
	if err != nil || len(dscs) != 1 {
		return "", fmt.Errorf("apt-get source %s=%s: want one .dsc, have %v (%v)", src, version, dscs, err)
	}
	return dscs[0], nil
}

// runIn runs a build step in dir, its output in the error.
func runIn(ctx context.Context, dir string, stdin *strings.Reader, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tail := out.String()
		if len(tail) > 4000 {
			tail = tail[len(tail)-4000:]
		}
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail)
	}
	return nil
}
