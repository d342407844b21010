package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The images kubeadm v1.36.3 runs, under the names it gives them (`kubeadm config images list
// --kubernetes-version v1.36.3`); the sandbox's is PauseRef.
const (
	KubeadmVersion    = "v1.36.3"
	KubeAPIServerRef  = "registry.k8s.io/kube-apiserver:" + KubeadmVersion
	KubeControllerRef = "registry.k8s.io/kube-controller-manager:" + KubeadmVersion
	KubeSchedulerRef  = "registry.k8s.io/kube-scheduler:" + KubeadmVersion
	KubeProxyRef      = "registry.k8s.io/kube-proxy:" + KubeadmVersion
	KubeadmCoreDNSRef = "registry.k8s.io/coredns/coredns:v1.14.2"
	KubeadmEtcdRef    = "registry.k8s.io/etcd:3.6.8-0"
	kubeadmBinDir     = "/usr/local/bin/"
)

// kubeadmImage is one image of kubeadm's set: a binary of the -kubeadm directory, where it
// lands in the image, and how the binary tells its version.
type kubeadmImage struct {
	bin, ref, path string
	versionArgs    []string
	versionOut     string // a line of the version output
	userland       string
}

// kubeadmImages are laid out as kubeadm's manifests run them. The static Pods name the command
// (`command: [kube-apiserver, ...]`, `etcd`), found on the image's PATH; kube-proxy's DaemonSet
// runs /usr/local/bin/kube-proxy, whose iptables mode execs iptables-restore and the rest;
// CoreDNS's Deployment passes only arguments to the entrypoint /coredns.
var kubeadmImages = []kubeadmImage{
	{"kube-apiserver", KubeAPIServerRef, kubeadmBinDir + "kube-apiserver", []string{"--version"}, "Kubernetes " + KubeadmVersion, ""},
	{"kube-controller-manager", KubeControllerRef, kubeadmBinDir + "kube-controller-manager", []string{"--version"}, "Kubernetes " + KubeadmVersion, ""},
	{"kube-scheduler", KubeSchedulerRef, kubeadmBinDir + "kube-scheduler", []string{"--version"}, "Kubernetes " + KubeadmVersion, ""},
	{"kube-proxy", KubeProxyRef, kubeadmBinDir + "kube-proxy", []string{"--version"}, "Kubernetes " + KubeadmVersion, userlandIptables},
	{"etcd", KubeadmEtcdRef, kubeadmBinDir + "etcd", []string{"--version"}, "etcd Version: 3.6.8", ""},
	{"coredns", KubeadmCoreDNSRef, "/coredns", []string{"-version"}, "CoreDNS-1.14.2", ""},
}

// kubeadmTargets is kubeadm's image set for the node's platform, from the binaries in dir
// (deploy/tools/build.sh builds them into bin/), and the pause image under PauseRef only.
// Every image runs as root, as upstream's control-plane images and kube-proxy's do; CoreDNS's
// runs as root too (see the README: upstream's runs as nonroot with a file capability).
func kubeadmTargets(root, dir string, node v1.Platform) ([]target, error) {
	var ts []target
	for _, k := range kubeadmImages {
		bin, err := filepath.Abs(filepath.Join(dir, k.bin))
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("-kubeadm %s: %w (TOOLS_ONLY=%q deploy/tools/build.sh builds it)", dir, err, k.bin)
		}
		if err := checkArch(bin, node); err != nil {
			return nil, err
		}
		_, tag, _ := strings.Cut(strings.TrimPrefix(k.ref, "registry.k8s.io/"), ":")
		ts = append(ts, target{
			name: k.bin, prebuilt: bin, path: k.path, refs: []string{k.ref}, platforms: []v1.Platform{node},
			user: "0:0", dirs: []string{"tmp"}, env: []string{DefaultPath}, version: tag,
			versionArgs: k.versionArgs, versionOut: k.versionOut, userland: k.userland,
		})
	}
	ts = append(ts, pauseTarget(root, []string{PauseRef}, node))
	return ts, nil
}

// elfArchs maps an ELF machine to the Go architecture it runs.
var elfArchs = map[elf.Machine]string{
	elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_386: "386", elf.EM_ARM: "arm",
	elf.EM_PPC64: "ppc64le", elf.EM_S390: "s390x", elf.EM_RISCV: "riscv64",
}

// checkArch refuses a binary built for another architecture than the image's.
func checkArch(bin string, p v1.Platform) error {
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("%s: %w", bin, err)
	}
	defer f.Close()
	if got := elfArchs[f.Machine]; got != p.Architecture {
		return fmt.Errorf("%s is a %s binary (%s), the image is for %s", bin, got, f.Machine, p)
	}
	return nil
}

// checkVersion runs the binary with its version flag and wants t.versionOut as one line of
// the output: an image must not carry another release under kubeadm's name. A binary of
// another architecture than the build machine's is not run.
func checkVersion(ctx context.Context, t target) error {
	if len(t.versionArgs) == 0 || t.platforms[0].Architecture != runtime.GOARCH {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, t.prebuilt, t.versionArgs...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", t.prebuilt, strings.Join(t.versionArgs, " "), err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(l) == t.versionOut {
			return nil
		}
	}
	return fmt.Errorf("%s is not the release %s names: %s says %q, want %q", t.prebuilt, t.refs[0],
		strings.Join(t.versionArgs, " "), bytes.TrimSpace(out), t.versionOut)
}

// iptablesAlternatives are the links Debian's iptables postinst makes with update-alternatives,
// through /etc/alternatives as it does, choosing the backend ("nft", Debian 12's default and
// the host's, or "legacy") for iptables and ip6tables; arptables and ebtables have only nft's.
// Each pair is a link and the path it leads to.
func iptablesAlternatives(backend string) ([][2]string, error) {
	if backend != "nft" && backend != "legacy" {
		return nil, fmt.Errorf("iptables backend %q: nft or legacy", backend)
	}
	var links [][2]string
	for _, g := range []struct{ cmd, backend string }{
		{"iptables", backend}, {"ip6tables", backend}, {"arptables", "nft"}, {"ebtables", "nft"},
	} {
		for _, suffix := range []string{"", "-restore", "-save"} {
			name := g.cmd + suffix
			links = append(links,
				[2]string{"usr/sbin/" + name, "/etc/alternatives/" + name},
				[2]string{"etc/alternatives/" + name, "/usr/sbin/" + g.cmd + "-" + g.backend + suffix})
		}
	}
	return links, nil
}

// KubeProxyUserland is kube-proxy's userland from debs: the packages' files (iptables,
// nftables, conntrack and their libraries), and the alternatives links of the iptables backend.
// It fails if iptables, ip6tables, their -save and -restore, nft or conntrack is missing from
// PATH, or if an ELF file needs a library no package holds.
func KubeProxyUserland(ctx context.Context, debs []string, backend string) ([]File, error) {
	links, err := iptablesAlternatives(backend)
	if err != nil {
		return nil, err
	}
	files, err := unpackDebs(ctx, debs)
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		if _, ok := files[l[0]]; !ok {
			files[l[0]] = &File{Name: l[0], Type: tar.TypeSymlink, Mode: 0o777, Linkname: l[1]}
		}
	}
	for _, l := range links {
		if _, ok := resolve(files, l[0]); !ok {
			return nil, fmt.Errorf("/%s -> %s leads to no program of the packages", l[0], l[1])
		}
	}
	return finishUserland(files, "iptables", "iptables-save", "iptables-restore",
		"ip6tables", "ip6tables-save", "ip6tables-restore", "nft", "conntrack")
}
