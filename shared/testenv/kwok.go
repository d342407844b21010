package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Kwok says how StartKwok runs kwok.
type Kwok struct {
	// Name names the process and its log; "" is "kwok".
	Name string
	// Manage is the flag that chooses the Nodes kwok plays, e.g.
	// "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".
	Manage string
	// LeaseSeconds is the Nodes' Lease duration (kwok renews every quarter of it, as kubelets
	// do); 0 keeps kwok's default.
	LeaseSeconds int
	// Stages names the files of bin/kwok-stages to load; none loads them all (what `make up`
	// uses).
	Stages []string
}

// paths returns bin/kwok and the stage files k asks for, or an error naming `make tools`
// when it has not built them.
func (k Kwok) paths() (bin string, stages []string, err error) {
	dir, err := FindBinDir()
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "kwok")
	if len(k.Stages) == 0 {
		stages, _ = filepath.Glob(filepath.Join(dir, "kwok-stages", "*.yaml"))
	}
	for _, s := range k.Stages {
		stages = append(stages, filepath.Join(dir, "kwok-stages", s))
	}
	missing := len(stages) == 0
	for _, p := range append([]string{bin}, stages...) {
		if _, err := os.Stat(p); err != nil {
			missing = true
		}
	}
	if missing {
		return "", nil, errors.New("bin/kwok and bin/kwok-stages are built by `make tools`")
	}
	return bin, stages, nil
}

// KwokBuilt returns an error naming `make tools` when bin/kwok or its stages are missing: a
// test that can do without kwok skips on it.
func KwokBuilt() error {
	_, _, err := Kwok{}.paths()
	return err
}

// StartKwok runs kwok against env's apiserver for the Nodes k.Manage chooses. It is stopped
// when the test ends (thawed first if frozen), with the tail of its log if the test failed. A
// kwok not built fails the test: call KwokBuilt first to skip instead.
func (env *Env) StartKwok(t testing.TB, k Kwok) *Process {
	t.Helper()
	bin, stages, err := k.paths()
	if err != nil {
		t.Fatal(err)
	}
	if k.Name == "" {
		k.Name = "kwok"
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig=" + env.Kubeconfig, "--manage-all-nodes=false", k.Manage,
		"--server-address=127.0.0.1:" + strconv.Itoa(port)}
	if k.LeaseSeconds > 0 {
		args = append(args, "--node-lease-duration-seconds="+strconv.Itoa(k.LeaseSeconds))
	}
	for _, s := range stages {
		args = append(args, "-c", s)
	}
	p, err := StartProcess(k.Name, filepath.Join(t.TempDir(), k.Name+".log"), bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("--- %s log ---\n%s", k.Name, p.Tail(20))
		}
	})
	return p
}
