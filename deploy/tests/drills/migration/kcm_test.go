package migration

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kcm-split/kcm-split/deploy/tests/drills/handover"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// kcmLease is the main Lease of kube-controller-manager (its default name and namespace).
const kcmLease = "kube-controller-manager"

// releaseGate makes KCM release its Leases when it stops (alpha in v1.36, off by default): the
// runbook recommends it from step 1 on, so that a stopped replica hands over at once instead
// of after --leader-elect-lease-duration.
const releaseGate = "--feature-gates=ControllerManagerReleaseLeaderElectionLockOnExit=true"

// migrated are KCM's names of every controller kcm-split replaces: the ones the migration
// configurations list and the naive switch turns off.
var migrated = []string{
	"endpoints-controller", "endpointslice-controller", "endpointslice-mirroring-controller",
	"node-lifecycle-controller", "taint-eviction-controller", "node-ipam-controller",
	"resourcequota-controller", "namespace-controller", "persistentvolume-binder-controller",
	"service-lb-controller",
}

// controllersOff is KCM's --controllers with every migrated controller off (the README's
// "turn them off in KCM first", and runbook step 3).
func controllersOff() string {
	return "--controllers=*," + "-" + strings.Join(migrated, ",-")
}

// kcmMigratedWrite reports whether ev is a write by one of KCM's migrated controllers: with
// --use-service-account-credentials=false each one's client name ends the user agent.
var kcmMigratedWrite = handover.KCMByUserAgent(handover.KCMClients...)

// nodeGrace is --node-monitor-grace-period on both sides: a Node whose Lease is not renewed
// for that long is the node lifecycle controller's to mark NotReady.
const nodeGrace = 8 * time.Second

// kcmReplica is one kube-controller-manager replica, as a static Pod is: one identity per
// process, restarted with new flags by a roll.
type kcmReplica struct {
	name string
	// port is the running process's --secure-port, picked afresh by each start: a port kept
	// across a restart is free while the replica is down, for any process to take.
	port    int
	dir     string
	starts  int
	p       *testenv.Process
	args    []string
	started time.Time
	// node, once set (kcmSet.mirror), makes every start publish the replica's mirror Pod on
	// that node, as the kubelet does for a static Pod.
	node string
}

// podName is the replica's mirror Pod: a static Pod's name ends with its node's; both
// replicas run on this host, so the replica's name stands in.
func (k *kcmReplica) podName() string { return "kube-controller-manager-" + k.name }

// publishMirror publishes the replica's mirror Pod for a process run with args, before it
// starts.
func (k *kcmReplica) publishMirror(t *testing.T, args []string) {
	t.Helper()
	cmd := append([]string{"kube-controller-manager"}, args...)
	if err := testenv.PublishMirrorPod(context.Background(), env.Client(t), "kube-system", k.podName(), k.node, "kube-controller-manager", testenv.KCMPodLabels(), cmd); err != nil {
		t.Fatalf("%s: mirror Pod: %v", k.name, err)
	}
}

// nodeTiming gives KCM's node lifecycle controller the drill's timing (also given to ours),
// so that a silent Node turns NotReady within seconds.
var nodeTiming = []string{"--node-monitor-period=1s", "--node-monitor-grace-period=" + nodeGrace.String()}

// flags are the replica's command line: the drill's common flags, then extra.
func (k *kcmReplica) flags(extra ...string) []string {
	args := append([]string{
		"--kubeconfig=" + env.Kubeconfig,
		"--leader-elect=true",
		// One identity for every controller, so that each request's user agent names its
		// controller (handover.KCMClients) and the admin token the drill writes to the kubeconfig is
		// enough: no ServiceAccount token controller needed.
		"--use-service-account-credentials=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", k.port),
		"--cert-dir=" + filepath.Join(k.dir, "certs"),
		// As on any control plane: with Leader Migration on, KCM takes the migration Lease
		// only once its service account token controller runs, which needs the key.
		"--service-account-private-key-file=" + env.ServiceAccountKey,
		"--v=2",
	}, nodeTiming...)
	args = append(args, extra...)
	return args
}

// start runs the replica with extra flags, and waits until it serves /healthz (up: it contends
// for the main Lease).
func (k *kcmReplica) start(t *testing.T, kcm string, extra ...string) {
	t.Helper()
	k.starts++
	k.args = extra
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	k.port = port
	args := k.flags(extra...)
	if k.node != "" {
		k.publishMirror(t, args)
	}
	k.started = time.Now()
	p, err := testenv.StartProcess(k.name, filepath.Join(k.dir, fmt.Sprintf("%s.%d.log", k.name, k.starts)), kcm, args...)
	if err != nil {
		t.Fatal(err)
	}
	k.p = p
	if k.node != "" {
		if err := testenv.MirrorPodStarted(context.Background(), env.Client(t), "kube-system", k.podName(), k.started); err != nil {
			t.Fatalf("%s: mirror Pod status: %v", k.name, err)
		}
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		if p.Exited() {
			return false, fmt.Errorf("%s exited with %d", k.name, p.ExitCode())
		}
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", k.port))
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%s not up: %v\n%s", k.name, err, p.Tail(30))
	}
}

// stop stops the replica as the kubelet stops a static Pod: SIGTERM, killed after 30 s.
func (k *kcmReplica) stop(t *testing.T) {
	t.Helper()
	if k.p == nil {
		return
	}
	if !k.p.Stop(30 * time.Second) {
		t.Logf("%s did not exit within 30s of SIGTERM: killed", k.name)
	}
}

// leading reports whether the running process of the replica holds the main Lease: it logged
// the acquisition and has not exited (KCM exits, or with the release gate stops its
// controllers, when it loses it; the drill never lets that happen).
func (k *kcmReplica) leading() bool {
	if k.p == nil || k.p.Exited() {
		return false
	}
	b, err := os.ReadFile(k.p.Log)
	return err == nil && bytes.Contains(b, []byte(`Successfully acquired lease" lock="kube-system/`+kcmLease+`"`))
}

// kcmSet is the two replicas.
type kcmSet struct {
	bin      string
	replicas []*kcmReplica
}

func newKCMSet(t *testing.T, bin string) *kcmSet {
	s := &kcmSet{bin: bin}
	for _, name := range []string{"kcm-a", "kcm-b"} {
		// Beside the apiserver's logs: kept with them by KCM_SPLIT_KEEP_TESTENV.
		dir := filepath.Join(env.Dir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		s.replicas = append(s.replicas, &kcmReplica{name: name, dir: dir})
	}
	t.Cleanup(func() {
		for _, k := range s.replicas {
			k.stop(t)
			if t.Failed() && k.p != nil {
				t.Logf("--- %s log ---\n%s", k.name, k.p.Tail(30))
			}
		}
	})
	return s
}

// mirror publishes from now on every replica's mirror Pod on node, starting with the running
// processes', as a kubelet running them as static Pods would show them.
func (s *kcmSet) mirror(t *testing.T, node string) {
	t.Helper()
	for _, k := range s.replicas {
		k.node = node
		k.publishMirror(t, k.flags(k.args...))
		if err := testenv.MirrorPodStarted(context.Background(), env.Client(t), "kube-system", k.podName(), k.started); err != nil {
			t.Fatalf("%s: mirror Pod status: %v", k.name, err)
		}
	}
}

// startAll starts both replicas with the same flags and waits until one of them leads.
func (s *kcmSet) startAll(t *testing.T, extra ...string) {
	t.Helper()
	for _, k := range s.replicas {
		k.start(t, s.bin, extra...)
	}
	s.waitLeader(t)
}

// waitLeader waits until one replica leads the main Lease, and returns it.
func (s *kcmSet) waitLeader(t *testing.T) *kcmReplica {
	t.Helper()
	var leader *kcmReplica
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		for _, k := range s.replicas {
			if k.leading() {
				leader = k
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no kube-controller-manager replica leads: %v", err)
	}
	return leader
}

// roll restarts the replicas one at a time with new flags, as a static Pod manifest edited on
// one control-plane node after the other: stop the process, start it with the new flags, wait
// until it is up. The replica not leading goes first, so that the roll moves the main Lease
// once (a roll that stopped the leader first would move it twice) and the leader, the only
// replica running controllers, is restarted last. It returns once the last replica is up, not
// waiting for a leader, and the moment the replica that led before the roll had exited (Stop
// returned: it waits on the process), zero if none led.
func (s *kcmSet) roll(t *testing.T, logf func(string, ...any), extra ...string) (leaderExited time.Time) {
	t.Helper()
	order := append([]*kcmReplica{}, s.replicas...)
	if order[0].leading() {
		order[0], order[1] = order[1], order[0]
	}
	for _, k := range order {
		was := k.leading()
		k.stop(t)
		if was {
			leaderExited = time.Now()
		}
		k.start(t, s.bin, extra...)
		logf("rolled %s (leading before: %v) to %s", k.name, was, strings.Join(extra, " "))
	}
	return leaderExited
}

// probeLeaderMigration checks whether kube-controller-manager can run a controller under a
// migration Lease: one replica, with a main Lease and a migration Lease of its own (no other
// holder of either), a configuration giving one controller to any component ("*"). It returns
// "crashes" if the replica exits with the duplicate informer name error once it took the
// migration Lease (v1.36.3), "works" if it started the migrated controller and still runs 10 s
// later, else "unknown" with what was seen. It never fails the test: it is there so that the
// project notices when upstream fixes it. Run it after the measured phases: the probe runs
// every controller beside the replicas (its own Leases), which would be a second writer.
func (s *kcmSet) probeLeaderMigration(t *testing.T, logf func(string, ...any)) (verdict, detail string) {
	t.Helper()
	dir := filepath.Join(env.Dir, "kcm-probe")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "unknown", err.Error()
	}
	cfg := filepath.Join(dir, "migration.yaml")
	const doc = "apiVersion: controllermanager.config.k8s.io/v1\nkind: LeaderMigrationConfiguration\n" +
		"leaderName: kcm-probe-migration\ncontrollerLeaders:\n- name: ttl-after-finished-controller\n  component: \"*\"\n"
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		return "unknown", err.Error()
	}
	port, err := testenv.FreePort()
	if err != nil {
		return "unknown", err.Error()
	}
	k := &kcmReplica{name: "kcm-probe", port: port, dir: dir, starts: 1}
	args := k.flags("--leader-elect-resource-name=kcm-probe", "--enable-leader-migration", "--leader-migration-config="+cfg)
	p, err := testenv.StartProcess(k.name, filepath.Join(dir, "kcm-probe.1.log"), s.bin, args...)
	if err != nil {
		return "unknown", err.Error()
	}
	defer p.Stop(30 * time.Second)
	const started = "leader migration: starting migrated controllers."
	var since time.Time
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(p.Log)
		if p.Exited() {
			if i := bytes.Index(b, []byte("is already registered")); i >= 0 {
				line := b[bytes.LastIndexByte(b[:i], '\n')+1:]
				if j := bytes.IndexByte(line, '\n'); j >= 0 {
					line = line[:j]
				}
				return "crashes", fmt.Sprintf("exited with %d; %s: %s", p.ExitCode(), p.Log, line)
			}
			return "unknown", fmt.Sprintf("exited with %d for another reason:\n%s", p.ExitCode(), p.Tail(8))
		}
		if since.IsZero() && bytes.Contains(b, []byte(started)) {
			since = time.Now()
			logf("probe: kcm-probe started its migrated controller")
		}
		if !since.IsZero() && time.Since(since) > 10*time.Second {
			return "works", "started the migrated controller under the migration Lease and still runs 10 s later"
		}
		time.Sleep(200 * time.Millisecond)
	}
	return "unknown", "neither exited nor started the migrated controller within 2 min:\n" + p.Tail(8)
}
