package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The agnhost image's userland comes from Debian packages: upstream's agnhost image carries a
// shell, curl and nc, and e2e specs run `/bin/sh -c "curl ..."` in agnhost Pods. Packages are
// fetched with apt-get (the registry these machines reach) and unpacked with dpkg-deb, whose
// tar stream this file re-writes with fixed owners and times so that the same .deb files give
// the same layer.

// File is one entry of an image layer besides the binary: a directory, a regular file or a
// symbolic link. Owners and times are set when the layer is written.
type File struct {
	// Name is the path in the image, without a leading slash.
	Name string
	// Type is tar.TypeDir, tar.TypeReg or tar.TypeSymlink.
	Type byte
	// Mode holds the permission bits.
	Mode int64
	// Linkname is a symlink's target.
	Linkname string
	// Data is a regular file's content.
	Data []byte
}

// DefaultPath is the PATH the agnhost image sets, the one containerd and Alpine use.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// debArch is Debian's name for an image platform's architecture.
func debArch(p v1.Platform) (string, error) {
	switch p.Architecture {
	case "amd64", "arm64", "s390x", "riscv64":
		return p.Architecture, nil
	case "386":
		return "i386", nil
	case "ppc64le":
		return "ppc64el", nil
	case "arm":
		if p.Variant == "v7" || p.Variant == "" {
			return "armhf", nil
		}
	}
	return "", fmt.Errorf("no Debian architecture for %s", p)
}

// readDebList reads package names, one a line; '#' starts a comment.
func readDebList(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		line, _, _ := strings.Cut(s.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			names = append(names, line)
		}
	}
	return names, s.Err()
}

// debsIn lists the .deb files of name in dir (any version, arch or "all").
func debsIn(dir, name, arch string) ([]string, error) {
	var out []string
	for _, a := range []string{arch, "all"} {
		m, err := filepath.Glob(filepath.Join(dir, name+"_*_"+a+".deb"))
		if err != nil {
			return nil, err
		}
		out = append(out, m...)
	}
	return out, nil
}

// fetchDebs returns one .deb file per name, from dir, downloading with `apt-get download` only
// those dir lacks: a kept directory keeps the versions, and so the digest, of the first build.
// A failed download is tried once more after `apt-get update` when running as root.
func fetchDebs(ctx context.Context, dir, arch string, names []string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var missing []string
	for _, n := range names {
		have, err := debsIn(dir, n, arch)
		if err != nil {
			return nil, err
		}
		if len(have) == 0 {
			missing = append(missing, n+":"+arch)
		}
	}
	if len(missing) > 0 {
		err := aptGet(ctx, dir, append([]string{"download", "-q"}, missing...)...)
		// A new machine may have no package lists yet, an old one lists versions the mirror
		// no longer serves: refresh them once (root only) and try again.
		if err != nil && os.Geteuid() == 0 {
			if uerr := aptGet(ctx, dir, "update", "-q"); uerr != nil {
				return nil, fmt.Errorf("%w; then %w", err, uerr)
			}
			err = aptGet(ctx, dir, append([]string{"download", "-q"}, missing...)...)
		}
		if err != nil {
			return nil, fmt.Errorf("%w (as root, `apt-get update` first)", err)
		}
	}
	var files []string
	for _, n := range names {
		have, err := debsIn(dir, n, arch)
		if err != nil {
			return nil, err
		}
		if len(have) != 1 {
			return nil, fmt.Errorf("%s: want one .deb of %s, have %d (%s): remove the stale ones", dir, n, len(have), strings.Join(have, " "))
		}
		files = append(files, have[0])
	}
	return files, nil
}

// aptGet runs apt-get in dir, its output in the error.
func aptGet(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return nil
}

// debVersion is "name=version" from a .deb file name (name_version_arch.deb, with ':' escaped).
func debVersion(file string) string {
	parts := strings.Split(strings.TrimSuffix(filepath.Base(file), ".deb"), "_")
	if len(parts) != 3 {
		return filepath.Base(file)
	}
	v, err := url.PathUnescape(parts[1])
	if err != nil {
		v = parts[1]
	}
	return parts[0] + "=" + v
}

// dropped are paths of a package a container never reads: manuals, shell completions, lintian
// and initramfs hooks, and documentation except each package's copyright file.
func dropped(name string) bool {
	for _, p := range []string{"usr/share/man/", "usr/share/info/", "usr/share/lintian/", "usr/share/zsh/",
		"usr/share/bash-completion/", "usr/share/initramfs-tools/", "usr/share/bug/"} {
		if strings.HasPrefix(name+"/", p) {
			return true
		}
	}
	if rest, ok := strings.CutPrefix(name, "usr/share/doc/"); ok {
		return strings.Count(rest, "/") != 1 || path.Base(rest) != "copyright"
	}
	return false
}

// unpackDeb adds the files of one package (its data tar, as `dpkg-deb --fsys-tarfile` reads
// it) to files. A path two packages both hold as different files is an error.
func unpackDeb(ctx context.Context, deb string, files map[string]*File) error {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb (Debian's dpkg) reads the packages: %w", err)
	}
	rerr := readDataTar(stdout, files)
	_, _ = io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", deb, err, stderr.String())
	}
	if rerr != nil {
		return fmt.Errorf("%s: %w", filepath.Base(deb), rerr)
	}
	return nil
}

func readDataTar(r io.Reader, files map[string]*File) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." || name == "/" || dropped(name) {
			continue
		}
		f := &File{Name: name, Mode: h.Mode & 0o7777}
		switch h.Typeflag {
		case tar.TypeDir:
			if _, ok := files[name]; ok {
				continue
			}
			f.Type = tar.TypeDir
		case tar.TypeReg:
			f.Type = tar.TypeReg
			if f.Data, err = io.ReadAll(tr); err != nil {
				return err
			}
		case tar.TypeSymlink:
			f.Type, f.Linkname = tar.TypeSymlink, h.Linkname
		case tar.TypeLink:
			// A hard link becomes a copy: the layer is written in path order, where the
			// link could come before its target.
			target, ok := files[path.Clean(strings.TrimPrefix(h.Linkname, "./"))]
			if !ok || target.Type != tar.TypeReg {
				return fmt.Errorf("%s: hard link to %s, which is no earlier regular file", name, h.Linkname)
			}
			f.Type, f.Data = tar.TypeReg, target.Data
		default:
			return fmt.Errorf("%s: tar entry type %q not supported", name, h.Typeflag)
		}
		if old, ok := files[name]; ok && (old.Type != f.Type || old.Linkname != f.Linkname || !bytes.Equal(old.Data, f.Data)) {
			return fmt.Errorf("%s is in two packages with different contents", name)
		}
		files[name] = f
	}
}

// onPath reports whether a command of that name is in one of DefaultPath's directories.
func onPath(files map[string]*File, cmd string) bool {
	for _, d := range strings.Split(strings.TrimPrefix(DefaultPath, "PATH=/"), ":/") {
		if _, ok := files[d+"/"+cmd]; ok {
			return true
		}
	}
	return false
}

// onPathResolved reports whether a command of that name is in one of DefaultPath's
// directories and, through its symbolic links, is a regular file of files.
func onPathResolved(files map[string]*File, cmd string) bool {
	for _, d := range strings.Split(strings.TrimPrefix(DefaultPath, "PATH=/"), ":/") {
		if _, ok := resolve(files, d+"/"+cmd); ok {
			return true
		}
	}
	return false
}

// busyboxApplets lists busybox's applets, asking the binary itself: with list "--list-full"
// as paths (bin/sh, usr/bin/wget, ...), with "--list" as names. It runs only on the build
// machine's architecture; elsewhere it lists none (busybox stays callable as
// `busybox <applet>`).
func busyboxApplets(ctx context.Context, busybox []byte, p v1.Platform, list string) ([]string, error) {
	if p.Architecture != runtime.GOARCH {
		return nil, nil
	}
	dir, err := os.MkdirTemp("", "busybox-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "busybox")
	if err := os.WriteFile(bin, busybox, 0o755); err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, bin, list).Output()
	if err != nil {
		return nil, fmt.Errorf("busybox %s: %w", list, err)
	}
	return strings.Fields(string(out)), nil
}

// unpackDebs is the files of every package of debs, less the dropped ones.
func unpackDebs(ctx context.Context, debs []string) (map[string]*File, error) {
	files := map[string]*File{}
	for _, d := range debs {
		if err := unpackDeb(ctx, d, files); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// Userland is the agnhost image's userland from debs: every package's files (less the
// dropped ones), /bin/nc for netcat-openbsd's nc.openbsd (Debian links it by alternatives,
// at install time), /etc/nsswitch.conf from libc-bin's default (its postinst installs it),
// and a /bin/busybox symlink for each busybox applet no package provides (dash's /bin/sh and
// nc stay theirs), as Alpine's image has them. It fails if sh, curl, nc, dig or getent is
// missing, or if an ELF program or library needs an interpreter or a shared library that no
// package holds. The files come sorted by path, each parent directory before its entries.
func Userland(ctx context.Context, debs []string, p v1.Platform) ([]File, error) {
	files, err := unpackDebs(ctx, debs)
	if err != nil {
		return nil, err
	}
	if _, ok := files["bin/nc.openbsd"]; ok && !onPath(files, "nc") {
		files["bin/nc"] = &File{Name: "bin/nc", Type: tar.TypeSymlink, Mode: 0o777, Linkname: "nc.openbsd"}
	}
	// libc-bin's postinst installs its default nsswitch.conf when there is none: without it,
	// glibc asks DNS before /etc/hosts and stops at DNS's "no such name" (getent hosts).
	if def, ok := files["usr/share/libc-bin/nsswitch.conf"]; ok && def.Type == tar.TypeReg {
		if _, ok := files["etc/nsswitch.conf"]; !ok {
			files["etc/nsswitch.conf"] = &File{Name: "etc/nsswitch.conf", Type: tar.TypeReg, Mode: 0o644, Data: def.Data}
		}
	}
	if bb, ok := files["bin/busybox"]; ok && bb.Type == tar.TypeReg {
		applets, err := busyboxApplets(ctx, bb.Data, p, "--list-full")
		if err != nil {
			return nil, err
		}
		for _, a := range applets {
			a = path.Clean(strings.TrimPrefix(a, "/"))
			if !strings.Contains(a, "/") || onPath(files, path.Base(a)) {
				continue // linuxrc, or a command a package provides
			}
			files[a] = &File{Name: a, Type: tar.TypeSymlink, Mode: 0o777, Linkname: "/bin/busybox"}
		}
	}
	return finishUserland(files, "sh", "curl", "nc", "dig", "getent")
}

// finishUserland checks that each of cmds is on DefaultPath and that every ELF file finds its
// libraries (checkLinked), adds the parent directories no package holds, and returns the files
// sorted by path, each parent directory before its entries.
func finishUserland(files map[string]*File, cmds ...string) ([]File, error) {
	for _, cmd := range cmds {
		if !onPathResolved(files, cmd) {
			return nil, fmt.Errorf("no %s in the userland: the package list must provide it", cmd)
		}
	}
	// Parents the links need (sbin/, usr/sbin/ may be in no package).
	for name := range files {
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if _, ok := files[d]; !ok {
				files[d] = &File{Name: d, Type: tar.TypeDir, Mode: 0o755}
			}
		}
	}
	if err := checkLinked(files); err != nil {
		return nil, err
	}
	out := make([]File, 0, len(files))
	for _, f := range files {
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// resolve follows symlinks inside files (at most 16) and returns the regular file reached.
func resolve(files map[string]*File, name string) (*File, bool) {
	for range 16 {
		f, ok := files[name]
		if !ok {
			return nil, false
		}
		if f.Type != tar.TypeSymlink {
			return f, f.Type == tar.TypeReg
		}
		if strings.HasPrefix(f.Linkname, "/") {
			name = path.Clean(strings.TrimPrefix(f.Linkname, "/"))
		} else {
			name = path.Join(path.Dir(name), f.Linkname)
		}
	}
	return nil, false
}

// checkLinked checks that every ELF file's interpreter and DT_NEEDED libraries are in files,
// in the file's own RUNPATH, the dynamic loader's default directories or those libc6's
// ld.so.conf.d names (the image has no ld.so.cache).
func checkLinked(files map[string]*File) error {
	dirs := []string{"lib", "usr/lib"}
	for name, f := range files {
		if strings.HasPrefix(name, "etc/ld.so.conf.d/") && f.Type == tar.TypeReg {
			for _, l := range strings.Split(string(f.Data), "\n") {
				if l = strings.TrimSpace(l); strings.HasPrefix(l, "/") {
					dirs = append(dirs, strings.TrimPrefix(path.Clean(l), "/"))
				}
			}
		}
	}
	var missing []string
	for name, f := range files {
		if f.Type != tar.TypeReg || !bytes.HasPrefix(f.Data, []byte(elf.ELFMAG)) {
			continue
		}
		ef, err := elf.NewFile(bytes.NewReader(f.Data))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for _, prog := range ef.Progs {
			if prog.Type != elf.PT_INTERP {
				continue
			}
			b, err := io.ReadAll(prog.Open())
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			interp := strings.TrimRight(string(b), "\x00")
			if _, ok := resolve(files, strings.TrimPrefix(interp, "/")); !ok {
				missing = append(missing, name+" needs "+interp)
			}
		}
		libs, err := ef.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		// A library's own search path first ($ORIGIN: glibc's gconv modules find their
		// helpers beside them).
		own := []string{}
		for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
			rp, _ := ef.DynString(tag)
			for _, e := range rp {
				for _, d := range strings.Split(e, ":") {
					d = strings.NewReplacer("${ORIGIN}", "/"+path.Dir(name), "$ORIGIN", "/"+path.Dir(name)).Replace(d)
					own = append(own, strings.TrimPrefix(path.Clean(d), "/"))
				}
			}
		}
		for _, lib := range libs {
			found := false
			for _, d := range append(own, dirs...) {
				if _, ok := resolve(files, d+"/"+lib); ok {
					found = true
					break
				}
			}
			if !found {
				missing = append(missing, name+" needs "+lib)
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("shared libraries no package holds (add their packages to the list): %s", strings.Join(missing, "; "))
	}
	return nil
}
