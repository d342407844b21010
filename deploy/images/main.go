// Command images builds kcm-split's container images without Docker: one OCI image per
// controller (linux/amd64 and linux/arm64 in one index), the pause image a node needs and,
// given a built agnhost, the agnhost image upstream's e2e specs run and stand-ins for their
// nginx, nonewprivs, nautilus and kitten images. Each image holds one static binary and
// nothing else, except agnhost's, which also holds a shell, curl, nc and dig from Debian's
// packages (agnhost-debs.txt) as upstream's does and porter's TLS pair, and the Update Demo
// stand-ins' /data.json;
// the same sources (and packages), version and SOURCE_DATE_EPOCH give the same digests. Images
// are written as OCI-layout tarballs (`ctr images import` reads them) and, with -push, pushed
// to the registry. With -kubeadm, it builds instead the images kubeadm v1.36.3 runs (control
// plane, etcd, kube-proxy with iptables from Debian's packages, CoreDNS, pause) under kubeadm's
// own names, from binaries built by deploy/tools/build.sh.
//
// Usage (from the repository root; `make images` and `make kubeadm-images` do this):
//
//	go run ./deploy/images -root . -out bin/images -version v0.1.0 -revision <sha> -epoch <unix>
//	go run ./deploy/images -root . -out bin/images/kubeadm -kubeadm bin -epoch <unix>
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Names the e2e framework of Kubernetes v1.36.3 and the kubelet ask for
// (k8s.io/kubernetes/test/utils/image/manifest.go), and the short local name of REALNODE.md.
const (
	AgnhostRef    = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
	NginxRef      = "registry.k8s.io/e2e-test-images/nginx:1.15-4"
	PauseRef      = "registry.k8s.io/pause:3.10.2"
	NonewprivsRef = "registry.k8s.io/e2e-test-images/nonewprivs:1.4"
	LocalPauseRef = "docker.io/local/pause:3.10"
)

const versionVar = "github.com/kcm-split/kcm-split/shared/app.Version"

type options struct {
	root, out, version, revision, source, registry string
	platforms, nodePlatform, only, agnhost, tags   string
	debList, debsDir, busyboxDebList               string
	busyboxBuildDir                                string
	busyboxFromSource                              bool
	metallb                                        string
	sampleAPIServer                                string
	kubeadm, proxyDebList, proxyDebsDir, iptables  string
	epoch                                          int64
	push                                           bool
}

func main() {
	var o options
	flag.StringVar(&o.root, "root", ".", "repository root")
	flag.StringVar(&o.out, "out", "bin/images", "directory the image tarballs are written to")
	flag.StringVar(&o.version, "version", "dev", "version: the controllers' tag, label and --version")
	flag.StringVar(&o.revision, "revision", "", "source revision (git commit) for the labels")
	flag.StringVar(&o.source, "source", "https://github.com/kcm-split/kcm-split", "source repository for the labels")
	flag.StringVar(&o.registry, "registry", "ghcr.io/kcm-split", "registry prefix of the controllers' images: <registry>/<binary>:<version>")
	flag.StringVar(&o.platforms, "platforms", "linux/amd64,linux/arm64", "platforms of the controllers' images")
	flag.StringVar(&o.nodePlatform, "node-platform", "linux/"+runtime.GOARCH, "platform of the pause and agnhost images")
	flag.StringVar(&o.only, "only", "", "comma-separated images to build (binary names, pause, agnhost, nginx, nonewprivs, nautilus, kitten, busybox); empty: every controller and pause, plus agnhost, its stand-ins (nginx, nonewprivs, nautilus, kitten) and busybox if -agnhost is set")
	flag.StringVar(&o.agnhost, "agnhost", "", "a built agnhost binary (node platform) to make "+AgnhostRef+" of")
	flag.StringVar(&o.debList, "agnhost-debs", "", "the list of Debian packages that make the agnhost image's userland (default <root>/deploy/images/agnhost-debs.txt)")
	flag.StringVar(&o.debsDir, "agnhost-debs-dir", "", "where those packages are kept, fetched by apt-get download when missing (default agnhost-debs/ beside -agnhost)")
	flag.StringVar(&o.busyboxDebList, "busybox-debs", "", "the list of Debian packages the busybox image ("+BusyboxRef+") is made of, kept with the agnhost image's (default <root>/deploy/images/busybox-debs.txt)")
	flag.BoolVar(&o.busyboxFromSource, "busybox-from-source", false, "the busybox image's binary rebuilt from the busybox-static package's Debian source with FEATURE_DI_ENV_HACK, so sh keeps environment variables named like data-1 as upstream's does (apt-get source, make and a C compiler; kept in -busybox-build-dir and reused); default: the package's own binary, which drops them")
	flag.StringVar(&o.busyboxBuildDir, "busybox-build-dir", "", "where -busybox-from-source keeps the rebuilt binary (default busybox-build/ beside the agnhost image's packages)")
	flag.StringVar(&o.metallb, "metallb", "", "a directory holding MetalLB's metallb-controller and metallb-speaker (node platform) to make "+MetalLBControllerRef+" and "+MetalLBSpeakerRef+" of")
	flag.StringVar(&o.sampleAPIServer, "sample-apiserver", "", "a built k8s.io/sample-apiserver (node platform) to make "+SampleAPIServerRef+" of (make conformance-full asks for it)")
	flag.StringVar(&o.kubeadm, "kubeadm", "", "a directory holding kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy and etcd of Kubernetes "+KubeadmVersion+" and CoreDNS (node platform): build only the images kubeadm "+KubeadmVersion+" runs, under its names, and pause")
	flag.StringVar(&o.proxyDebList, "kube-proxy-debs", "", "the list of Debian packages that make the kube-proxy image's userland (default <root>/deploy/images/kube-proxy-debs.txt)")
	flag.StringVar(&o.proxyDebsDir, "kube-proxy-debs-dir", "", "where those packages are kept, fetched by apt-get download when missing (default kube-proxy-debs/ in the -kubeadm directory)")
	flag.StringVar(&o.iptables, "iptables-backend", "nft", "the kube-proxy image's iptables: nft (Debian 12's default) or legacy; the node's own iptables must use the same")
	flag.Int64Var(&o.epoch, "epoch", envEpoch(), "creation time and file mtime, Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	flag.StringVar(&o.tags, "extra-tags", "", "comma-separated tags the controllers' images also get besides -version (the release adds the chart's appVersion, without the v)")
	flag.BoolVar(&o.push, "push", false, "also push each controller's index to <registry>/<binary>:<version> (and each extra tag); credentials from the Docker config, as docker login writes it")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func envEpoch() int64 {
	n, _ := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	return n
}

// target is one image to build: a main package, where it is built from, and its names.
type target struct {
	name      string   // binary and file name
	dir       string   // module directory the package is built in (GOWORK=off)
	pkg       string   // package, relative to dir
	ldflags   string   // -ldflags
	path      string   // the binary's path in the image (entrypoint)
	refs      []string // names in the tarball
	platforms []v1.Platform
	prebuilt  string // a binary built elsewhere (agnhost), node platform only
	user      string
	args      []string
	dirs      []string
	push      bool
	env       []string // the config's environment; with a userland, DefaultPath by default
	version   string   // the version label; empty: -version
	userland  string   // a Debian userland: "agnhost" (Userland) or "iptables" (KubeProxyUserland)
	// extra are further files (the TLS pair of agnhost's porter, the stand-ins' data), made
	// from the creation time.
	extra func(created time.Time) ([]File, error)
	mode  int64 // the binary's mode in the layer; 0: 0755
	// inUserland: the program at path is the userland's own (busybox): no binary is built or
	// added.
	inUserland bool
	// noEntrypoint: the config has args as its command and no entrypoint.
	noEntrypoint bool
	// versionArgs make the prebuilt binary print its version, which holds the line versionOut.
	versionArgs []string
	versionOut  string
}

// Debian userlands of the images that carry one.
const (
	userlandAgnhost  = "agnhost"
	userlandIptables = "iptables"
	userlandBusybox  = "busybox"
)

func run(ctx context.Context, o options) error {
	root, err := filepath.Abs(o.root)
	if err != nil {
		return err
	}
	out, err := filepath.Abs(o.out)
	if err != nil {
		return err
	}
	// The cross-compiled binaries live only until their image is written (Go's build cache
	// keeps the next build fast).
	build := filepath.Join(out, ".build")
	if err := os.MkdirAll(build, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(build)
	targets, err := targets(root, o)
	if err != nil {
		return err
	}
	created := time.Unix(o.epoch, 0).UTC()
	for _, t := range targets {
		files, env, lbls, err := contents(ctx, root, o, t, created)
		if err != nil {
			return err
		}
		var imgs []v1.Image
		for _, p := range t.platforms {
			bin := t.prebuilt
			if bin == "" && !t.inUserland {
				bin = filepath.Join(build, t.name+"-"+p.OS+"-"+p.Architecture)
				if err := goBuild(ctx, t, p, bin); err != nil {
					return err
				}
			}
			img, err := Image(Spec{
				Binary: bin, Path: t.path, Platform: p, Created: created, User: t.user, Args: t.args, Dirs: t.dirs,
				Files: files, Env: env, Labels: lbls, Mode: t.mode, NoEntrypoint: t.noEntrypoint,
			})
			if err != nil {
				return fmt.Errorf("%s %s: %w", t.name, p, err)
			}
			imgs = append(imgs, img)
		}
		idx, err := Index(imgs)
		if err != nil {
			return err
		}
		file := filepath.Join(out, t.name+".tar")
		if err := WriteArchive(file, idx, t.refs, created); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return err
		}
		fi, err := os.Stat(file)
		if err != nil {
			return err
		}
		fmt.Printf("images: %s %s %s (%s, %.1f MB)\n", strings.Join(t.refs, " "), d, rel(root, file), platformList(t.platforms), float64(fi.Size())/1e6)
		if o.push && t.push {
			if err := push(ctx, idx, t.refs, authn.DefaultKeychain); err != nil {
				return err
			}
		}
	}
	return nil
}

// contents is what t's image holds besides its binary, after checking the binary's version
// when t names one: the userland's files, the environment and the labels.
func contents(ctx context.Context, root string, o options, t target, created time.Time) ([]File, []string, map[string]string, error) {
	if err := checkVersion(ctx, t); err != nil {
		return nil, nil, nil, err
	}
	lbls := labels(o, t.name, created)
	if t.version != "" {
		lbls["org.opencontainers.image.version"] = t.version
	}
	files, pkgs, err := userland(ctx, root, o, t)
	if err != nil {
		return nil, nil, nil, err
	}
	if t.extra != nil {
		more, err := t.extra(created)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", t.name, err)
		}
		files = withFiles(files, more...)
	}
	env := t.env
	if pkgs != "" {
		if env == nil {
			env = []string{DefaultPath}
		}
		// The packages' versions: which userland a digest holds.
		lbls["io.kcm-split.debian-packages"] = pkgs
	}
	if t.userland == userlandIptables {
		lbls["io.kcm-split.iptables-backend"] = o.iptables
	}
	return files, env, lbls, nil
}

// push writes idx (its images and blobs first) under every reference.
func push(ctx context.Context, idx v1.ImageIndex, refs []string, keys authn.Keychain) error {
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	for _, ref := range refs {
		tag, err := name.NewTag(ref, name.StrictValidation)
		if err != nil {
			return err
		}
		if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(keys)); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		fmt.Printf("images: pushed %s@%s\n", ref, d)
	}
	return nil
}

func targets(root string, o options) ([]target, error) {
	platforms, err := parsePlatforms(o.platforms)
	if err != nil {
		return nil, err
	}
	node, err := parsePlatforms(o.nodePlatform)
	if err != nil {
		return nil, err
	}
	if len(node) != 1 {
		return nil, errors.New("-node-platform takes one platform")
	}
	var ts []target
	if o.kubeadm != "" {
		ts, err = kubeadmTargets(root, o.kubeadm, node[0])
	} else {
		ts, err = projectTargets(root, o, platforms, node)
	}
	if err != nil {
		return nil, err
	}
	if o.only == "" {
		return ts, nil
	}
	want := strings.Split(o.only, ",")
	var sel []target
	for _, t := range ts {
		if slices.Contains(want, t.name) {
			sel = append(sel, t)
		}
	}
	if len(sel) != len(want) {
		return nil, fmt.Errorf("-only %s: some names match no image (agnhost needs -agnhost)", o.only)
	}
	return sel, nil
}

// projectTargets are kcm-split's controllers (platforms), pause and, when given, agnhost,
// nginx and MetalLB (node).
// Over 80 lines: one image after another, each with the reasons for its contents.
func projectTargets(root string, o options, platforms, node []v1.Platform) ([]target, error) {
	cmds, err := filepath.Glob(filepath.Join(root, "services", "*", "cmd", "*"))
	if err != nil {
		return nil, err
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("no services/*/cmd/* under %s", root)
	}
	var ts []target
	for _, c := range cmds {
		bin := filepath.Base(c)
		refs := []string{o.registry + "/" + bin + ":" + o.version}
		for _, tag := range strings.Split(o.tags, ",") {
			if tag != "" && tag != o.version {
				refs = append(refs, o.registry+"/"+bin+":"+tag)
			}
		}
		ts = append(ts, target{
			name: bin, dir: filepath.Dir(filepath.Dir(c)), pkg: "./cmd/" + bin,
			// As `make build` builds them, and deploy/Dockerfile.
			ldflags: "-s -w -X " + versionVar + "=" + o.version,
			// The chart passes only arguments: the entrypoint is the same in every image.
			path:      "/controller",
			refs:      refs,
			platforms: platforms,
			push:      true,
		})
	}
	ts = append(ts, pauseTarget(root, []string{PauseRef, LocalPauseRef}, node[0]))
	if o.agnhost != "" {
		abs, err := filepath.Abs(o.agnhost)
		if err != nil {
			return nil, err
		}
		// As upstream's image: root, entrypoint /agnhost, "pause" by default, /uploads for
		// netexec's upload handler, /tmp, porter's TLS pair in the working directory, /agnhost-2
		// (a link to the binary: the Containers specs' other entrypoint), and a
		// userland (a shell, curl, nc, dig) for the specs that exec into the Pod: Debian's
		// packages where upstream's has Alpine's.
		ts = append(ts, target{
			name: "agnhost", prebuilt: abs, path: "/agnhost", refs: []string{AgnhostRef}, platforms: node,
			user: "0:0", args: []string{"pause"}, dirs: []string{"tmp", "uploads"}, userland: userlandAgnhost,
			extra: agnhostExtras,
		})
		// A stand-in for upstream's nginx image, which the EndpointSlice specs run only to
		// have Ready Pods: agnhost serving HTTP on port 80, as nginx would.
		ts = append(ts, target{
			name: "nginx", prebuilt: abs, path: "/agnhost", refs: []string{NginxRef}, platforms: node,
			user: "0:0", args: []string{"netexec", "--http-port=80", "--udp-port=-1"},
		})
		// Upstream's nautilus and kitten images (the kubectl Update Demo specs) are agnhost
		// running test-webserver (HTTP on port 80, files from /) with a /data.json naming their
		// picture; these are the same, without the picture, which no spec reads.
		// Upstream's nonewprivs image runs a setuid-root program printing its effective uid
		// (the Security Context specs on allowPrivilegeEscalation read it); agnhost's
		// nonewprivs subcommand prints the same, from a setuid-root binary here too.
		ts = append(ts, target{
			name: "nonewprivs", prebuilt: abs, path: "/agnhost", refs: []string{NonewprivsRef}, platforms: node,
			user: "0:0", args: []string{"nonewprivs"}, mode: 0o4755,
		})
		for _, ud := range []struct{ name, ref string }{{"nautilus", NautilusRef}, {"kitten", KittenRef}} {
			picture := ud.name + ".jpg"
			ts = append(ts, target{
				name: ud.name, prebuilt: abs, path: "/agnhost", refs: []string{ud.ref}, platforms: node,
				user: "0:0", args: []string{"test-webserver"},
				extra: func(time.Time) ([]File, error) {
					f, err := updateDemoData(picture)
					return []File{f}, err
				},
			})
		}
	}
	if o.agnhost != "" {
		// Upstream's e2e busybox image: busybox, every applet a link in /bin, root, `sh` by
		// default and no entrypoint (a Pod's command is the whole command), /tmp, and the
		// /etc/passwd and /etc/group of root and nobody.
		ts = append(ts, target{
			name: "busybox", path: "/bin/busybox", refs: []string{BusyboxRef}, platforms: node,
			user: "0:0", args: []string{"sh"}, dirs: []string{"tmp"}, userland: userlandBusybox,
			inUserland: true, noEntrypoint: true,
		})
	}
	if o.sampleAPIServer != "" {
		sa, err := sampleAPIServerTarget(o.sampleAPIServer, node)
		if err != nil {
			return nil, err
		}
		ts = append(ts, sa)
	}
	if o.metallb != "" {
		ml, err := metallbTargets(o.metallb, node)
		if err != nil {
			return nil, err
		}
		ts = append(ts, ml...)
	}
	return ts, nil
}

// pauseTarget is the sandbox's pause program (deploy/images/pause) under refs.
func pauseTarget(root string, refs []string, node v1.Platform) target {
	return target{
		name: "pause", dir: filepath.Join(root, "deploy", "images"), pkg: "./pause", ldflags: "-s -w",
		path: "/pause", refs: refs, platforms: []v1.Platform{node},
	}
}

// userland is t's Debian userland, if it has one, and "name=version ..." of its packages.
func userland(ctx context.Context, root string, o options, t target) ([]File, string, error) {
	switch t.userland {
	case "":
		return nil, "", nil
	case userlandAgnhost:
		list, dir := o.debList, o.debsDir
		if list == "" {
			list = filepath.Join(root, "deploy", "images", "agnhost-debs.txt")
		}
		if dir == "" {
			dir = filepath.Join(filepath.Dir(o.agnhost), "agnhost-debs")
		}
		return debUserland(ctx, list, dir, t.platforms[0], func(debs []string) ([]File, error) {
			return Userland(ctx, debs, t.platforms[0])
		})
	case userlandBusybox:
		list, dir := o.busyboxDebList, o.debsDir
		if list == "" {
			list = filepath.Join(root, "deploy", "images", "busybox-debs.txt")
		}
		if dir == "" {
			dir = filepath.Join(filepath.Dir(o.agnhost), "agnhost-debs")
		}
		build := o.busyboxBuildDir
		if build == "" {
			build = filepath.Join(filepath.Dir(dir), "busybox-build")
		}
		var note string
		files, pkgs, err := debUserland(ctx, list, dir, t.platforms[0], func(debs []string) ([]File, error) {
			var bin []byte
			if o.busyboxFromSource {
				var err error
				if bin, note, err = busyboxBinary(ctx, debs, t.platforms[0], build); err != nil {
					return nil, err
				}
			}
			return BusyboxUserland(ctx, debs, t.platforms[0], bin)
		})
		if note != "" {
			pkgs += " " + note
		}
		return files, pkgs, err
	case userlandIptables:
		list, dir := o.proxyDebList, o.proxyDebsDir
		if list == "" {
			list = filepath.Join(root, "deploy", "images", "kube-proxy-debs.txt")
		}
		if dir == "" {
			dir = filepath.Join(o.kubeadm, "kube-proxy-debs")
		}
		return debUserland(ctx, list, dir, t.platforms[0], func(debs []string) ([]File, error) {
			return KubeProxyUserland(ctx, debs, o.iptables)
		})
	}
	return nil, "", fmt.Errorf("%s: no userland %q", t.name, t.userland)
}

// debUserland fetches (when missing) the Debian packages of the list for platform p into
// dir, and makes a userland of them; it returns the layer's files and "name=version ..." of
// the packages.
func debUserland(ctx context.Context, list, dir string, p v1.Platform, unpack func(debs []string) ([]File, error)) ([]File, string, error) {
	names, err := readDebList(list)
	if err != nil {
		return nil, "", err
	}
	arch, err := debArch(p)
	if err != nil {
		return nil, "", err
	}
	debs, err := fetchDebs(ctx, dir, arch, names)
	if err != nil {
		return nil, "", err
	}
	files, err := unpack(debs)
	if err != nil {
		return nil, "", err
	}
	var vs []string
	for _, d := range debs {
		vs = append(vs, debVersion(d))
	}
	slices.Sort(vs)
	return files, strings.Join(vs, " "), nil
}

func parsePlatforms(s string) ([]v1.Platform, error) {
	var ps []v1.Platform
	for _, f := range strings.Split(s, ",") {
		p, err := v1.ParsePlatform(f)
		if err != nil {
			return nil, err
		}
		if p.OS != "linux" {
			return nil, fmt.Errorf("platform %s: only linux", f)
		}
		ps = append(ps, *p)
	}
	return ps, nil
}

func platformList(ps []v1.Platform) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

func labels(o options, title string, created time.Time) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":   title,
		"org.opencontainers.image.version": o.version,
		"org.opencontainers.image.source":  o.source,
		"org.opencontainers.image.created": created.Format(time.RFC3339),
	}
	if o.revision != "" {
		l["org.opencontainers.image.revision"] = o.revision
	}
	return l
}

// goBuild cross-compiles t for p as a static binary, the module alone (GOWORK=off), with paths
// and VCS stamps left out so the binary depends only on the sources and the toolchain.
func goBuild(ctx context.Context, t target, p v1.Platform, bin string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", t.ldflags, "-o", bin, t.pkg)
	cmd.Dir = t.dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	if p.Variant != "" && p.Architecture == "arm" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(p.Variant, "v"))
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s: %w", t.name, p, err)
	}
	return nil
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil {
		return r
	}
	return p
}
