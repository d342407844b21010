package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// BusyboxRef is the busybox image e2e.test v1.36.3 asks for (test/utils/image/manifest.go:
// BusyBox, 1.37.0-1). Specs give it the command to run (`sh -c ...`, `sysctl ...`), or none:
// then it runs `sh`, which exits at once with no input.
const BusyboxRef = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"

// busyboxCommands are commands the e2e specs run in the busybox image; the build fails if one
// is not a link on PATH.
var busyboxCommands = []string{
	"sh", "env", "sysctl", "sleep", "cat", "ls", "echo", "test", "true", "false", "wget", "nslookup",
	"ping", "hostname", "id", "mkdir", "touch", "stat", "grep", "find", "mount", "df", "nc", "top",
}

// BusyboxUserland is the busybox image's layer from debs (Debian's busybox-static): its
// files (less the dropped ones), a symbolic link /bin/<applet> -> busybox for every applet
// `busybox --list` names, as upstream's image has them all in /bin (/bin/sysctl: Debian
// would put it in /sbin), /etc/passwd and /etc/group with root and nobody, and /root. The
// applets are asked from the binary, so p must be the build machine's platform. A non-nil
// binary (rebuiltBusybox's, with -busybox-from-source) replaces the package's /bin/busybox.
// The files come sorted by path, each parent directory before its entries.
func BusyboxUserland(ctx context.Context, debs []string, p v1.Platform, binary []byte) ([]File, error) {
	if p.Architecture != runtime.GOARCH {
		return nil, fmt.Errorf("the busybox image is built for the build machine's architecture (%s), not %s: its applets are asked from the binary", runtime.GOARCH, p.Architecture)
	}
	files, err := unpackDebs(ctx, debs)
	if err != nil {
		return nil, err
	}
	bb, ok := files["bin/busybox"]
	if !ok || bb.Type != tar.TypeReg {
		return nil, errors.New("no /bin/busybox in the packages: the list must name busybox-static")
	}
	if binary != nil {
		bb.Data = binary
	}
	applets, err := busyboxApplets(ctx, bb.Data, p, "--list")
	if err != nil {
		return nil, err
	}
	for _, a := range applets {
		if a == "busybox" || strings.ContainsAny(a, "/.") {
			continue
		}
		if old, ok := files["bin/"+a]; ok && old.Type != tar.TypeSymlink {
			return nil, fmt.Errorf("/bin/%s is a package's file, not busybox's applet", a)
		}
		files["bin/"+a] = &File{Name: "bin/" + a, Type: tar.TypeSymlink, Mode: 0o777, Linkname: "busybox"}
	}
	for _, f := range []File{
		{Name: "etc/passwd", Type: tar.TypeReg, Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")},
		{Name: "etc/group", Type: tar.TypeReg, Mode: 0o644, Data: []byte("root:x:0:\nnobody:x:65534:\n")},
		{Name: "root", Type: tar.TypeDir, Mode: 0o700},
		{Name: "home", Type: tar.TypeDir, Mode: 0o755},
	} {
		files[f.Name] = &f
	}
	return finishUserland(files, busyboxCommands...)
}
