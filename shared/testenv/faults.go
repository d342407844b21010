package testenv

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Fault injection for drills: an apiserver outage, a compacted etcd that expires watches, and
// (on Process) Freeze and Thaw. The control plane is shared by every test of a package, so each
// helper that breaks it registers a cleanup that repairs it when the test ends, failed or not.

// StopAPIServer stops kube-apiserver (SIGTERM, killed after 30s) and leaves etcd running.
// Until StartAPIServer, every request fails (connection refused) and every watch is closed.
// If the test ends with the apiserver still stopped, a cleanup starts it again, so that the
// package's later tests find it running.
func (env *Env) StopAPIServer(t testing.TB) {
	t.Helper()
	env.mu.Lock()
	p := env.apiserver
	env.mu.Unlock()
	if p.Exited() {
		t.Fatal("StopAPIServer: kube-apiserver is not running")
	}
	p.Stop(30 * time.Second)
	t.Cleanup(func() {
		env.mu.Lock()
		running := !env.apiserver.Exited()
		env.mu.Unlock()
		if !running {
			env.StartAPIServer(t)
		}
	})
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the same etcd with the
// same port, serving certificate, tokens, ServiceAccount key and audit log (appended to), and
// waits until it is ready. Config, Kubeconfig and every client built from them work again
// unchanged; objects and resource versions are etcd's, so they survive. The new apiserver's
// watch cache starts at etcd's current revision: a watch resumed from an older resource
// version may get 410 Expired (see ExpireWatches). It fails t if the apiserver does not become
// ready within 90s (its log is in Dir, kube-apiserver.<n>.log).
func (env *Env) StartAPIServer(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := env.startAPIServer(ctx); err != nil {
		// The port was free when Start picked it; another process could have taken it
		// while the apiserver was down, which the log would say.
		t.Fatalf("StartAPIServer: %v", err)
	}
}

// APIServerOutage stops kube-apiserver, waits d and starts it again: StopAPIServer, then
// StartAPIServer. It returns when the apiserver is ready again.
func (env *Env) APIServerOutage(t testing.TB, d time.Duration) {
	t.Helper()
	env.StopAPIServer(t)
	time.Sleep(d)
	env.StartAPIServer(t)
}

// CompactEtcd compacts etcd up to its current revision (physically, before it returns) and
// returns that revision. etcd then refuses every older revision, so a request the apiserver
// passes through to etcd at an older resource version fails with 410 Expired (a watch of a
// resource whose watch cache is off, for example). The apiserver's watch cache is not
// affected: a watch it serves from an older resource version still in its window succeeds
// (the package's tests show it). ExpireWatches also restarts the apiserver, which empties that
// window. Compacting twice at the same revision is not an error.
func (env *Env) CompactEtcd(t testing.TB) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rev, err := env.compactEtcd(ctx)
	if err != nil {
		t.Fatalf("CompactEtcd: %v", err)
	}
	return rev
}

// ExpireWatches makes every client resume its watches from scratch, as after a long
// partition: it compacts etcd to its current revision (returned) and restarts kube-apiserver.
// The restart closes every open watch; the new apiserver's watch cache starts at the
// compacted revision, so a client resuming a watch from a resource version older than it gets
// 410 Expired and an informer relists (seeing objects deleted meanwhile only as
// DeletedFinalStateUnknown). To make a controller miss events, freeze it first:
//
//	c.Freeze()                 // its watches stall
//	... create, update, delete objects ...
//	env.ExpireWatches(t)       // the events it did not read are gone
//	c.Thaw()                   // it reconnects, gets 410, relists
func (env *Env) ExpireWatches(t testing.TB) int64 {
	t.Helper()
	rev := env.CompactEtcd(t)
	env.StopAPIServer(t)
	env.StartAPIServer(t)
	return rev
}

// compactEtcd reads etcd's current revision and compacts to it through etcd's v3 JSON
// gateway, which needs no etcd client library.
func (env *Env) compactEtcd(ctx context.Context) (int64, error) {
	var rng struct {
		Header struct {
			Revision int64 `json:"revision,string"`
		} `json:"header"`
	}
	// Any key: the header carries the store's revision.
	key := base64.StdEncoding.EncodeToString([]byte("/registry"))
	if err := env.etcdPost(ctx, "/v3/kv/range", map[string]any{"key": key, "count_only": true}, &rng); err != nil {
		return 0, err
	}
	rev := rng.Header.Revision
	if rev == 0 {
		return 0, fmt.Errorf("etcd answered revision 0")
	}
	err := env.etcdPost(ctx, "/v3/kv/compaction", map[string]any{"revision": fmt.Sprint(rev), "physical": true}, nil)
	// The apiserver compacts too (every 5 minutes); that revision is done already.
	if err != nil && !strings.Contains(err.Error(), "required revision has been compacted") {
		return 0, err
	}
	return rev, nil
}

// etcdPost posts body as JSON to etcd's gateway at path and decodes the answer into out.
func (env *Env) etcdPost(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.EtcdURL+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s: %s", path, resp.Status, bytes.TrimSpace(data))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// LeaseRecord is what a coordination.k8s.io Lease says about its holder.
type LeaseRecord struct {
	// Holder is spec.holderIdentity: a kcm-split binary's "<hostname>_<uuid>"
	// (Controller.Identity); empty when the Lease was released or does not exist.
	Holder string
	// AcquireTime and RenewTime are spec.acquireTime and spec.renewTime (zero when unset).
	AcquireTime, RenewTime time.Time
	// Duration is spec.leaseDurationSeconds.
	Duration time.Duration
	// Transitions is spec.leaseTransitions: how many times the Lease changed hands.
	Transitions int32
	// ResourceVersion changes with every write of the Lease.
	ResourceVersion string
}

// LeaseHolder reads the Lease ns/name. A Lease that does not exist is the zero LeaseRecord;
// any other error fails t.
func (env *Env) LeaseHolder(t testing.TB, ns, name string) LeaseRecord {
	t.Helper()
	lease, err := env.Client(t).CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return LeaseRecord{}
	}
	if err != nil {
		t.Fatalf("reading Lease %s/%s: %v", ns, name, err)
	}
	var r LeaseRecord
	r.ResourceVersion = lease.ResourceVersion
	if h := lease.Spec.HolderIdentity; h != nil {
		r.Holder = *h
	}
	if a := lease.Spec.AcquireTime; a != nil {
		r.AcquireTime = a.Time
	}
	if a := lease.Spec.RenewTime; a != nil {
		r.RenewTime = a.Time
	}
	if d := lease.Spec.LeaseDurationSeconds; d != nil {
		r.Duration = time.Duration(*d) * time.Second
	}
	if n := lease.Spec.LeaseTransitions; n != nil {
		r.Transitions = *n
	}
	return r
}
