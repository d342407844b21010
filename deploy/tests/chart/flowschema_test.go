package chart

// API Priority and Fairness: outside kube-system the chart's FlowSchemas keep a leader's Lease
// renewals out of the queue a workload floods. A drill on a real kube-apiserver with few seats.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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

// floodResult is what one trial saw of the leader's Lease.
type floodResult struct {
	renewals   int
	maxGap     time.Duration
	lost       bool // the holder changed or the leader exited
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
			"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms")
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
		// Watch the Lease as an exempt admin: each new renewTime is a renewal.
		var last time.Time
		var holder string
		lastChange := time.Now()
		for fctx.Err() == nil {
			l, err := admin.CoordinationV1().Leases(release).Get(ctx, lease, metav1.GetOptions{})
			if err == nil && l.Spec.RenewTime != nil && l.Spec.HolderIdentity != nil {
				if holder == "" {
					holder = *l.Spec.HolderIdentity
				}
				if *l.Spec.HolderIdentity != holder {
					res.lost = true
				}
				if rt := l.Spec.RenewTime.Time; !rt.Equal(last) {
					if !last.IsZero() {
						res.renewals++
					}
					last, lastChange = rt, time.Now()
				}
			}
			if gap := time.Since(lastChange); gap > res.maxGap {
				res.maxGap = gap
			}
			if ctrl.Exited() {
				res.lost = true
			}
			time.Sleep(100 * time.Millisecond)
		}
		wg.Wait()
		return res
	}

	control := trial("control")
	t.Logf("FIGURE flowschema control (no FlowSchema): %d renewals in 20s, longest without one %v, leader lost %t; flood %d lists, %d answered, %d 429s (%s)",
		control.renewals, control.maxGap.Round(10*time.Millisecond), control.lost, control.requests, control.answered, control.throttled, control.floodError)
	kubectlApply(tmpl("true"))
	with := trial("flowschema")
	t.Logf("FIGURE flowschema with the chart's FlowSchemas: %d renewals in 20s, longest without one %v, leader lost %t; flood %d lists, %d answered, %d 429s (%s)",
		with.renewals, with.maxGap.Round(10*time.Millisecond), with.lost, with.requests, with.answered, with.throttled, with.floodError)
	// The invariant: no renewal missed (the renew deadline is 3 s; the test's own polling adds 100 ms).
	if with.lost || with.maxGap > 3*time.Second || with.renewals == 0 {
		t.Errorf("with the chart's FlowSchemas a renewal was missed: %+v", with)
	}
	if with.answered == 0 || control.answered == 0 {
		t.Errorf("the flood listed nothing (control %+v, with %+v)", control, with)
	}
}

func yamlString(m map[string]any) (string, error) {
	b, err := yaml.Marshal(m)
	return string(b), err
}
