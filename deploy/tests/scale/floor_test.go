package scale

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/shared/benchkit"
)

// TestFloor measures each process's memory on an empty cluster, where its caches hold almost
// nothing: the floor a binary starts from before it pays for any object. Four processes, one
// after the other on one control plane: the smallest client-go program caching Namespaces
// (testdata/floor), the same cache without the clientset (testdata/floorrest),
// namespace-controller, and upstream kube-controller-manager running only its namespace
// controller. Run by `make scale-floor`; it reports, it asserts nothing about sizes.
func TestFloor(t *testing.T) {
	if os.Getenv("SCALE_FLOOR") == "" {
		t.Skip("run by `make scale-floor` (SCALE_FLOOR unset)")
	}
	const settle = 20 * time.Second
	dir := t.TempDir()
	bare, err := benchkit.Build("github.com/kcm-split/kcm-split/deploy/tests/scale/testdata/floor", dir)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := benchkit.Build("github.com/kcm-split/kcm-split/deploy/tests/scale/testdata/floorrest", dir)
	if err != nil {
		t.Fatal(err)
	}
	sides := []struct {
		name string
		side benchkit.Side
		bin  string
	}{
		{name: "smallest client-go Namespace informer", bin: bare},
		{name: "the same informer on a core v1 REST client, no clientset", bin: rest},
		{name: "namespace-controller", side: benchkit.Ours("namespace-controller", "github.com/kcm-split/kcm-split/services/namespace/cmd/namespace-controller", "--leader-elect=true")},
		{name: "kube-controller-manager --controllers=namespace-controller", side: benchkit.UpstreamSide("namespace-controller")},
	}
	env := benchkit.ControlPlane(t)
	var rows []string
	for _, s := range sides {
		var p *benchkit.Process
		bin := s.bin
		if bin != "" {
			p = benchkit.Start(t, s.name, bin, "--kubeconfig="+env.Kubeconfig)
		} else {
			bin = s.side.Executable(t)
			p = s.side.Start(t, bin, env.Kubeconfig)
		}
		time.Sleep(settle)
		m := p.Memory()
		size := int64(0)
		if fi, err := os.Stat(bin); err == nil {
			size = fi.Size()
		}
		rows = append(rows, fmt.Sprintf("| %s | %.1f | %.1f | %.1f | %.1f |", s.name, benchkit.MiB(m.RSS), benchkit.MiB(m.Anon), benchkit.MiB(m.RSS-m.Anon), benchkit.MiB(size)))
		p.Shutdown()
	}
	out := "| process (empty cluster, " + settle.String() + " after start) | RSS (MiB) | RssAnon (MiB) | file-backed (MiB) | executable (MiB) |\n|---|---|---|---|---|\n" + strings.Join(rows, "\n")
	fmt.Println(out)
	if o := os.Getenv("SCALE_OUT"); o != "" {
		if err := os.WriteFile(filepath.Join(o, "results-floor.md"), []byte(out+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}
