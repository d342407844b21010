package chart

// API Priority and Fairness: outside kube-system the chart's FlowSchemas keep a leader's Lease
// renewals out of the queue a workload floods. A drill on a real kube-apiserver with few seats.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/yaml"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

func TestFlowSchemaRenders(t *testing.T) {
	c, v := chart(t)
	args := append(v.Only("endpoints"), "--set", "controllers.quota.enabled=true")
	count := func(ns string, more ...string) []Object {
		return byKind(render(t, c, "r", ns, append(args, more...)...), "FlowSchema")
	}
	if n := len(count("kube-system")); n != 0 {
		t.Errorf("in kube-system: %d FlowSchemas by default, want none (the built-in ones cover it)", n)
	}
	if n := len(count("kube-system", "--set", "flowControl.enabled=true")); n != 2 {
		t.Errorf("in kube-system with flowControl.enabled: %d FlowSchemas, want 2", n)
	}
	if n := len(count("kcm", "--set", "flowControl.enabled=false")); n != 0 {
		t.Errorf("flowControl.enabled=false: %d FlowSchemas", n)
	}
	fss := count("kcm", "--set", "controllers.quota.serviceAccountName=own")
	if len(fss) != 2 {
		t.Fatalf("outside kube-system: %d FlowSchemas, want 2", len(fss))
	}
	for _, o := range fss {
		out, _ := yamlString(o.Raw)
		for _, want := range []string{"name: r-kcm-split-endpoints-controller", "name: own", "namespace: kcm"} {
			if !strings.Contains(out, want) {
				t.Errorf("FlowSchema %s lacks %q:\n%s", o.Name, want, out)
			}
		}
	}
	if _, err := c.Template("r", ns, "--set", "flowControl.leaderElection.matchingPrecedence=0"); err == nil {
		t.Errorf("matchingPrecedence 0 accepted")
	}
}

// leaseDuration is the flood trials' --leader-elect-lease-duration: a gap between two renewals
// this long would let a standby take the Lease.
const leaseDuration = 4 * time.Second

// floodResult is what one trial saw of the leader's Lease.
type floodResult struct {
	renewals   int
	maxGap     time.Duration // the longest gap between successive renewTimes
	lost       bool          // the holder changed, the leader exited, or renewals stopped
	requests   int64
	answered   int64 // lists that returned the ConfigMaps
	throttled  int64 // 429s the flood got
	floodError string
}

// Over 80 lines: a control trial and a FlowSchema trial on one throttled apiserver, sharing its flood data, its flooders and the trial closure.
func TestFlowSchemaKeepsLeaseRenewals(t *testing.T) {
	testenv.Require(t, env)
	c, v := chart(t)
	// Few seats, so a bounded flood fills workload-low: APF splits these among its levels.
	env2, err := testenv.Start(testenv.Options{ExtraAPIServerArgs: []string{"--max-requests-inflight=2", "--max-mutating-requests-inflight=1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env2.Stop)
	ctx := context.Background()
	admin := env2.Client(t)
	const release, alias = "kcm-flood", "namespace"
	cv := v.Controllers[alias]
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: release}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubectlApply := func(manifests []byte) {
		t.Helper()
		bin := filepath.Join(filepath.Dir(c.Helm), "kubectl")
		cmd := exec.Command(bin, "--kubeconfig", env2.Kubeconfig, "apply", "-f", "-")
		cmd.Stdin = bytes.NewReader(manifests)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
	}
	tmpl := func(fc string) []byte {
		out, err := c.Template("ct", release, append(v.Only(alias), "--set", "flowControl.enabled="+fc, "--set", "dashboards.enabled=false")...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	kubectlApply(tmpl("false"))
	saName := "ct-kcm-split-" + cv.Binary

	// The flood: 16 workload ServiceAccounts (the built-in "service-accounts" FlowSchema, at
	// workload-low; 16 flows, so fair queuing does not set the controller's one flow against a
	// single other) listing 300 ConfigMaps of 16 KiB, 48 lists at a time, for 20 s.
	seed := "flood-data"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: seed}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)}, Data: map[string]string{"d": strings.Repeat("x", 16<<10)}}
		if _, err := admin.CoreV1().ConfigMaps(seed).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const flows = 16
	for i := range flows {
		if _, err := admin.CoreV1().ServiceAccounts(seed).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("workload-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A Role of its own: the built-in "view" is aggregated by kube-controller-manager, which
	// does not run here.
	if _, err := admin.RbacV1().Roles(seed).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "workload"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(seed).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "workload"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "workload"},
		Subjects: []rbacv1.Subject{{Kind: "Group", Name: "system:serviceaccounts:" + seed}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token := func(ns, sa string) string {
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	var flooders []kubernetes.Interface
	for i := range flows {
		cfg := rest.CopyConfig(env2.Config)
		cfg.BearerToken, cfg.QPS, cfg.Burst = token(seed, fmt.Sprintf("workload-%d", i)), -1, 0
		cfg.CertData, cfg.KeyData, cfg.Username, cfg.Password = nil, nil, "", ""
		flooders = append(flooders, kubernetes.NewForConfigOrDie(cfg))
	}

	bin := buildBinary(t, alias, cv.Binary)
	trial := func(name string) floodResult {
		t.Helper()
		kubeconfig := filepath.Join(t.TempDir(), "sa.kubeconfig")
		if err := testenv.WriteKubeconfig(kubeconfig, env2.Host, "controller", token(release, saName)); err != nil {
			t.Fatal(err)
		}
		lease := cv.Binary
		_ = admin.CoordinationV1().Leases(release).Delete(ctx, lease, metav1.DeleteOptions{})
		ctrl := env2.StartController(t, bin, cv.Binary+"-"+name, "--kubeconfig="+kubeconfig,
			"--leader-elect-resource-namespace="+release, "--leader-elect-resource-name="+lease,
			"--leader-elect-lease-duration="+leaseDuration.String(), "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms")
		ctrl.WaitLeadingAndSynced(lease, 60*time.Second)
		defer ctrl.Stop(30 * time.Second)

		var res floodResult
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		var errOnce sync.Once
		for i := range 48 {
			flooder := flooders[i%flows]
			wg.Add(1)
			go func() {
				defer wg.Done()
				for fctx.Err() == nil {
					_, err := flooder.CoreV1().ConfigMaps(seed).List(fctx, metav1.ListOptions{})
					atomic.AddInt64(&res.requests, 1)
					if err == nil {
						atomic.AddInt64(&res.answered, 1)
					}
					if err != nil && fctx.Err() == nil {
						if strings.Contains(err.Error(), "429") || strings.Contains(err.Error(), "too many requests") || strings.Contains(err.Error(), "Too many requests") {
							atomic.AddInt64(&res.throttled, 1)
						} else {
							errOnce.Do(func() { res.floodError = err.Error() })
						}
					}
				}
			}()
		}
		// Every write of the Lease, watched as an exempt admin: each new renewTime is a renewal.
		if err := watchRenewals(ctx, fctx, admin, release, lease, ctrl.Exited, &res); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		wg.Wait()
		return res
	}

	control := trial("control")
	t.Logf("FIGURE flowschema control (no FlowSchema): %d renewals in the 20s flood and the first after it, longest renewTime gap %v, leader lost %t; flood %d lists, %d answered, %d 429s (%s)",
		control.renewals, control.maxGap.Round(10*time.Millisecond), control.lost, control.requests, control.answered, control.throttled, control.floodError)
	kubectlApply(tmpl("true"))
	with := trial("flowschema")
	t.Logf("FIGURE flowschema with the chart's FlowSchemas: %d renewals in the 20s flood and the first after it, longest renewTime gap %v, leader lost %t; flood %d lists, %d answered, %d 429s (%s)",
		with.renewals, with.maxGap.Round(10*time.Millisecond), with.lost, with.requests, with.answered, with.throttled, with.floodError)
	// The invariant: the holder never let its Lease lapse. A renewTime gap of a lease duration
	// is one a standby could have taken over in; the gaps are the holder's own clock, which a
	// starved test goroutine does not stretch.
	if with.lost || with.maxGap >= leaseDuration || with.renewals == 0 {
		t.Errorf("with the chart's FlowSchemas a renewal was missed: %+v", with)
	}
	if with.answered == 0 || control.answered == 0 {
		t.Errorf("the flood listed nothing (control %+v, with %+v)", control, with)
	}
}

// watchRenewals follows every write of the Lease ns/name while flood lasts, and then to the
// first renewal sent after it ended, into res: the renewals, the longest gap between
// successive renewTimes, and whether the holder changed or exited was true. A watch resumed
// from its last resourceVersion misses no write, and renewTime is the holder's clock when it
// sent the renewal, so a test goroutine starved on a loaded machine sees renewals late but
// never measures their gaps longer.
func watchRenewals(ctx, flood context.Context, c kubernetes.Interface, ns, name string, exited func() bool, res *floodResult) error {
	l, err := c.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the Lease: %w", err)
	}
	if l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
		return fmt.Errorf("the Lease has no holder: %+v", l.Spec)
	}
	holder, last := *l.Spec.HolderIdentity, l.Spec.RenewTime.Time
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		return c.CoordinationV1().Leases(ns).Watch(ctx, o)
	}}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rw, err := watchtools.NewRetryWatcherWithContext(wctx, l.ResourceVersion, lw)
	if err != nil {
		return err
	}
	defer rw.Stop()
	check := time.NewTicker(time.Second)
	defer check.Stop()
	floodDone := flood.Done()
	var ended time.Time
	var giveUp <-chan time.Time // once the flood ended: a renewal must come within this
	for {
		select {
		case ev, ok := <-rw.ResultChan():
			if !ok {
				return errors.New("the Lease watch ended")
			}
			if ev.Type == watch.Error {
				return fmt.Errorf("the Lease watch failed: %v", apierrors.FromObject(ev.Object))
			}
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != holder {
				res.lost = true
				return nil
			}
			if rt := l.Spec.RenewTime; rt != nil && !rt.Time.Equal(last) {
				res.renewals++
				res.maxGap = max(res.maxGap, rt.Sub(last))
				last = rt.Time
				if !ended.IsZero() && last.After(ended) {
					return nil
				}
			}
		case <-floodDone:
			ended, floodDone = time.Now(), nil
			giveUp = time.After(30 * time.Second)
		case <-giveUp:
			res.lost = true
			return nil
		case <-check.C:
			if exited() {
				res.lost = true
				return nil
			}
		}
	}
}

func yamlString(m map[string]any) (string, error) {
	b, err := yaml.Marshal(m)
	return string(b), err
}
