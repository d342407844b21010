package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func logSize(t *testing.T, p *Process) int64 {
	t.Helper()
	st, err := os.Stat(p.Log)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// waitGrows waits until p's log grows past size.
func waitGrows(t *testing.T, p *Process, size int64, what string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return logSize(t, p) > size, nil
	})
	if err != nil {
		t.Fatalf("%s: the log did not grow past %d bytes: %v", what, size, err)
	}
}

// A frozen process makes no progress at all; thawed, it goes on; frozen again, it still stops
// on SIGTERM alone.
func TestFreezeAndThaw(t *testing.T) {
	bin := BuildOnce(t, "./testdata/cmd/ticker")
	p, err := StartProcess("ticker", filepath.Join(t.TempDir(), "ticker.log"), bin)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	waitGrows(t, p, 0, "started")

	if err := p.Freeze(); err != nil {
		t.Fatal(err)
	}
	if !allThreadsStopped(p.PID()) {
		t.Fatal("Freeze returned with a thread still running")
	}
	frozen := logSize(t, p)
	time.Sleep(300 * time.Millisecond) // 60 ticks
	if got := logSize(t, p); got != frozen {
		t.Fatalf("frozen process wrote %d bytes in 300ms", got-frozen)
	}

	if err := p.Thaw(); err != nil {
		t.Fatal(err)
	}
	waitGrows(t, p, frozen, "thawed")
	if allThreadsStopped(p.PID()) {
		t.Fatal("still stopped after Thaw")
	}

	if err := p.Freeze(); err != nil {
		t.Fatal(err)
	}
	if !p.Stop(10 * time.Second) {
		t.Fatal("a frozen process needed SIGKILL to stop")
	}
	if !strings.HasSuffix(p.Tail(1), "terminated") {
		t.Fatalf("last line %q, want the SIGTERM handler's", p.Tail(1))
	}
	if err := p.Freeze(); err == nil {
		t.Fatal("Freeze of an exited process succeeded")
	}
}

// A frozen controller keeps its Lease but stops renewing it; thawed in time, it renews again.
// Identity, LeaseHolder and the audit log agree on who holds it.
func TestFrozenControllerStopsRenewing(t *testing.T) {
	Require(t, env)
	b := Binary{ID: "testenv-leader", Dir: "testdata"}
	// Another test may have left this Lease held by a process now gone: a Lease of our own.
	lease := "testenv-freeze"
	c := env.Start(t, b, "leader", "--leader-elect-resource-name="+lease)
	c.WaitLeadingAndSynced(lease, LeadTimeout)
	id := c.Identity()
	if id == "" || c.PID() <= 0 {
		t.Fatalf("identity %q, pid %d", id, c.PID())
	}
	first := env.LeaseHolder(t, "kube-system", lease)
	if first.Holder != id || first.AcquireTime.IsZero() || first.Duration != 15*time.Second {
		t.Fatalf("Lease = %+v, want held by %s since a time, for 15s", first, id)
	}
	if missing := env.LeaseHolder(t, "kube-system", "no-such-lease"); missing != (LeaseRecord{}) {
		t.Fatalf("a missing Lease = %+v, want the zero LeaseRecord", missing)
	}

	// Renewals every retry period (2s): wait for one, so that their absence below means something.
	renewed := func(after LeaseRecord) LeaseRecord {
		t.Helper()
		var r LeaseRecord
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			r = env.LeaseHolder(t, "kube-system", lease)
			return r.RenewTime.After(after.RenewTime), nil
		})
		if err != nil {
			t.Fatalf("Lease not renewed after %s: %v (now %+v)", after.RenewTime, err, r)
		}
		return r
	}
	before := renewed(first)

	if err := c.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozenAt := time.Now()
	atFreeze := env.LeaseHolder(t, "kube-system", lease)
	time.Sleep(5 * time.Second) // two retry periods and more, less than the 10s renew deadline
	atThaw := env.LeaseHolder(t, "kube-system", lease)
	thawAt := time.Now()
	if err := c.Thaw(); err != nil {
		t.Fatal(err)
	}
	if atThaw.ResourceVersion != atFreeze.ResourceVersion || atThaw.Holder != id {
		t.Fatalf("Lease changed while its holder was frozen: %+v, then %+v", atFreeze, atThaw)
	}
	after := renewed(atThaw)
	if after.Holder != id || !after.AcquireTime.Equal(before.AcquireTime) {
		t.Fatalf("after the thaw: %+v, want still held by %s since %s", after, id, before.AcquireTime)
	}

	leaseWrites := func(ev AuditEvent) bool {
		return ev.ObjectRef.Resource == "leases" && ev.ObjectRef.Name == lease && ev.Succeeded()
	}
	// A write in flight at the freeze may be received just after it.
	during, err := env.Writes(ByUserAgentPrefix(b.UserAgentPrefix()), leaseWrites, ReceivedAfter(frozenAt.Add(time.Second)), func(ev AuditEvent) bool {
		return ev.RequestReceivedTimestamp.Before(thawAt)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(during) != 0 {
		t.Fatalf("%d Lease writes received while the controller was frozen: %+v", len(during), during)
	}
	since, err := env.Writes(ByUserAgentPrefix(b.UserAgentPrefix()), leaseWrites, ReceivedAfter(thawAt))
	if err != nil {
		t.Fatal(err)
	}
	if len(since) == 0 {
		t.Fatal("no Lease write audited since the thaw, yet the Lease was renewed")
	}
}

func servingCert(t *testing.T) []byte {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(env.Host, "https://"), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

// During an outage every request fails; after it, clients built before it work unchanged and
// every object is still there.
func TestAPIServerOutage(t *testing.T) {
	Require(t, env)
	ctx := context.Background()
	ns := env.Namespace(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.UserAgent = "testenv-outage/v0"
	cfg.Timeout = 5 * time.Second
	client := kubernetes.NewForConfigOrDie(cfg)
	fromFile, err := clientcmd.BuildConfigFromFlags("", env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	fileClient := kubernetes.NewForConfigOrDie(fromFile)
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := client.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cert := servingCert(t)

	env.StopAPIServer(t)
	if _, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "before", metav1.GetOptions{}); err == nil {
		t.Fatal("a Get succeeded while the apiserver was down")
	}
	if err := drainUntilClosed(w, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	env.StartAPIServer(t)
	if !bytes.Equal(servingCert(t), cert) {
		t.Error("the restarted apiserver serves another certificate")
	}
	for name, c := range map[string]kubernetes.Interface{"Config": client, "Kubeconfig": fileClient} {
		if _, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "before", metav1.GetOptions{}); err != nil {
			t.Fatalf("client from %s after the restart: %v", name, err)
		}
	}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// One audit log across both apiservers.
	writes, err := env.Writes(ByUserAgentPrefix("testenv-outage/", "configmaps"), func(ev AuditEvent) bool { return ev.ObjectRef.Namespace == ns })
	if err != nil {
		t.Fatal(err)
	}
	if len(writes) != 2 || writes[0].ObjectRef.Name != "before" || writes[1].ObjectRef.Name != "after" {
		t.Fatalf("audited writes = %+v, want the creates of before and after", writes)
	}

	// APIServerOutage is the same in one call.
	start := time.Now()
	env.APIServerOutage(t, 500*time.Millisecond)
	if time.Since(start) < 500*time.Millisecond {
		t.Fatal("APIServerOutage returned before the outage's length")
	}
	if _, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "after", metav1.GetOptions{}); err != nil {
		t.Fatalf("after APIServerOutage: %v", err)
	}
}

// drainUntilClosed reads w until its result channel closes.
func drainUntilClosed(w watch.Interface, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
		case <-deadline:
			return errors.New("the watch stayed open")
		}
	}
}

// watchFrom starts a watch of ns's ConfigMaps from rv and returns its first event, or the
// error that refused it.
func watchFrom(t *testing.T, client kubernetes.Interface, ns, rv string) (watch.Event, error) {
	t.Helper()
	w, err := client.CoreV1().ConfigMaps(ns).Watch(context.Background(), metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return watch.Event{}, err
	}
	defer w.Stop()
	select {
	case ev := <-w.ResultChan():
		return ev, nil
	case <-time.After(10 * time.Second):
		t.Fatalf("watch from %s: no event in 10s", rv)
		return watch.Event{}, nil
	}
}

// isExpired reports whether a watch was refused with 410 Gone, either as the request's error
// or as its first event.
func isExpired(ev watch.Event, err error) bool {
	if err != nil {
		return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
	}
	if ev.Type != watch.Error {
		return false
	}
	status, ok := ev.Object.(*metav1.Status)
	return ok && status.Code == 410
}

// After CompactEtcd, etcd refuses old revisions; after ExpireWatches, so does the apiserver:
// a watch resumed from an old resource version gets 410 and a client must relist.
func TestCompactionExpiresWatches(t *testing.T) {
	Require(t, env)
	ctx := context.Background()
	ns := env.Namespace(t)
	client := env.Client(t)
	cm, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := cm.ResourceVersion
	for i := range 3 {
		cm.Data = map[string]string{"i": string(rune('0' + i))}
		if cm, err = client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Before: the watch from the old version replays the updates.
	if ev, err := watchFrom(t, client, ns, old); err != nil || ev.Type != watch.Modified {
		t.Fatalf("watch from %s before compaction: %v, %v; want the first update", old, ev.Type, err)
	}

	rev := env.CompactEtcd(t)
	if again := env.CompactEtcd(t); again < rev {
		t.Fatalf("second compaction at %d, before the first's %d", again, rev)
	}
	// etcd itself refuses the old revision.
	var rng map[string]any
	err = env.etcdPost(ctx, "/v3/kv/range", map[string]any{"key": "Lw==", "revision": old}, &rng)
	if err == nil || !strings.Contains(err.Error(), "compacted") {
		t.Fatalf("etcd range at revision %s after compaction: %v, want 'compacted'", old, err)
	}

	// The apiserver's watch cache still serves it: compaction alone expires nothing there.
	if ev, err := watchFrom(t, client, ns, old); err != nil || ev.Type != watch.Modified {
		t.Fatalf("watch from %s after CompactEtcd alone: %v, %v; want the first update, from the watch cache", old, ev.Type, err)
	}

	env.ExpireWatches(t)
	ev, err := watchFrom(t, client, ns, old)
	if !isExpired(ev, err) {
		t.Fatalf("watch from %s after ExpireWatches: %v %+v, %v; want 410 Expired", old, ev.Type, ev.Object, err)
	}
	// What a client does next: relist. The object survived, and a watch from the list's
	// version works. (Not from the object's own version: other writes since then are older
	// than the new watch cache too.)
	list, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Data["i"] != "2" {
		t.Fatalf("relist after ExpireWatches: %+v, %v; want x with its last update", list, err)
	}
	now := &list.Items[0]
	now.Data["i"] = "3"
	if _, err := client.CoreV1().ConfigMaps(ns).Update(ctx, now, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev, err := watchFrom(t, client, ns, list.ResourceVersion); err != nil || ev.Type != watch.Modified {
		t.Fatalf("watch from the relist's version %s: %v %+v, %v; want the update", list.ResourceVersion, ev.Type, ev.Object, err)
	}
}

func TestLogIdentity(t *testing.T) {
	for _, tc := range []struct{ name, log, want string }{
		{"json", `{"level":"info","msg":"Serving plain HTTP"}
{"level":"info","logger":"x","msg":"Starting","version":"dev","identity":"vm_1234"}
{"level":"info","msg":"Waiting for the Lease","identity":"other"}
`, "vm_1234"},
		{"console", "2026-11-23T21:19:02.335Z\tINFO\tx\tapp/app.go:309\tStarting\t{\"version\": \"dev\", \"identity\": \"vm_1ef3\"}\n", "vm_1ef3"},
		{"not started yet", `{"level":"info","msg":"Waiting for the Lease","identity":"other"}` + "\n", ""},
	} {
		if got := logIdentity([]byte(tc.log)); got != tc.want {
			t.Errorf("%s: logIdentity = %q, want %q", tc.name, got, tc.want)
		}
	}
}
