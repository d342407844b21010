package chart

// The take-over RBAC proof: with takeOverFromKCM.enabled, each binary (--take-over-from-kcm)
// waits until two informers in kube-controller-manager's namespace have synced: Pods filtered
// by --kcm-pod-selector and Leases filtered by the field selector metadata.name=--kcm-lease-name.
// A Role short of one of those requests would leave the binary waiting forever, with nothing
// but a retrying reflector in its log; a Role wider than them would let every controller read
// the whole of kube-system. This test holds the chart's take-over Roles to both.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestTakeOverRBAC renders every controller with takeOverFromKCM.enabled and the take-over
// namespace set to a fresh one, creates the ServiceAccounts and the take-over Roles and
// RoleBindings only (not the controllers' ClusterRoles: a namespace controller may list
// everything anyway, which would hide a too-wide take-over Role), and then, with each
// ServiceAccount's own token, makes the requests the binary's take-over informers make, on the
// selector and Lease name its rendered command line passes: both informers sync and hold
// exactly kube-controller-manager's Pod and Lease; LIST, WATCH (an event arrives) and GET
// succeed. Outside that: another Lease (GET, and LIST/WATCH by its name), all Leases unfiltered,
// and Secrets are Forbidden.
// Over 80 lines: kube-controller-manager's fixtures and the rendered take-over RBAC created once, then every binary's checks as subtests sharing them.
func TestTakeOverRBAC(t *testing.T) {
	testenv.Require(t, env)
	ctx := context.Background()
	admin := env.Client(t)
	c, v := chart(t)
	release := env.Namespace(t) // ServiceAccounts
	kcmNS := env.Namespace(t)   // kube-controller-manager's Pods and Lease, instead of kube-system
	const (
		selector = "component=kube-controller-manager"
		leaseKCM = "kube-controller-manager"
		leaseOth = "someone-else"
	)
	args := []string{"--set", "takeOverFromKCM.enabled=true", "--set", "takeOverFromKCM.namespace=" + kcmNS}
	for _, a := range v.Aliases() {
		args = append(args, "--set", fmt.Sprintf("controllers.%s.enabled=true", a))
	}
	objs := render(t, c, "to", release, args...)

	// kube-controller-manager as kubeadm runs it, a Pod the selector leaves out, its Lease and
	// another one.
	kcmPod := func(name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	}
	for _, p := range []*corev1.Pod{
		kcmPod("kube-controller-manager-cp1", map[string]string{"component": "kube-controller-manager", "tier": "control-plane"}),
		kcmPod("etcd-cp1", map[string]string{"component": "etcd"}),
	} {
		if _, err := admin.CoreV1().Pods(kcmNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{leaseKCM, leaseOth} {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr("cp1_" + name), LeaseDurationSeconds: ptr(int32(15))}}
		if _, err := admin.CoordinationV1().Leases(kcmNS).Create(ctx, l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Each binary's ServiceAccount and the flags its Deployment passes; the take-over Roles and
	// RoleBindings (the only objects rendered into kcmNS).
	type binary struct {
		sa                    string
		ns, podSel, leaseName string
	}
	bins := map[string]*binary{} // by Deployment name
	roles, bindings := 0, 0
	var deps []*appsv1.Deployment
	for _, o := range objs {
		switch obj := o.Typed.(type) {
		case *corev1.ServiceAccount:
			mustCreate(t, func() error {
				_, err := admin.CoreV1().ServiceAccounts(release).Create(ctx, obj, metav1.CreateOptions{})
				return err
			})
		case *rbacv1.Role:
			if obj.Namespace != kcmNS {
				continue
			}
			roles++
			mustCreate(t, func() error {
				_, err := admin.RbacV1().Roles(kcmNS).Create(ctx, obj, metav1.CreateOptions{})
				return err
			})
		case *rbacv1.RoleBinding:
			if obj.Namespace != kcmNS {
				continue
			}
			bindings++
			mustCreate(t, func() error {
				_, err := admin.RbacV1().RoleBindings(kcmNS).Create(ctx, obj, metav1.CreateOptions{})
				return err
			})
		case *appsv1.Deployment:
			deps = append(deps, obj)
		}
	}
	for _, dep := range deps {
		b := &binary{sa: dep.Spec.Template.Spec.ServiceAccountName}
		for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
			if val, ok := strings.CutPrefix(a, "--kcm-namespace="); ok {
				b.ns = val
			}
			if val, ok := strings.CutPrefix(a, "--kcm-pod-selector="); ok {
				b.podSel = val
			}
			if val, ok := strings.CutPrefix(a, "--kcm-lease-name="); ok {
				b.leaseName = val
			}
		}
		if b.ns != kcmNS || b.podSel != selector || b.leaseName != leaseKCM || b.sa == "" {
			t.Fatalf("Deployment %s: ServiceAccount %q, --kcm-namespace=%q --kcm-pod-selector=%q --kcm-lease-name=%q; want a ServiceAccount, %q %q %q",
				dep.Name, b.sa, b.ns, b.podSel, b.leaseName, kcmNS, selector, leaseKCM)
		}
		bins[dep.Name] = b
	}
	if len(bins) != len(v.Aliases()) || roles != len(bins) || bindings != len(bins) {
		t.Fatalf("rendered %d Deployments, %d take-over Roles and %d RoleBindings in %s; want %d of each",
			len(bins), roles, bindings, kcmNS, len(v.Aliases()))
	}

	for dep, b := range bins {
		t.Run(dep, func(t *testing.T) {
			start := time.Now()
			tr, err := admin.CoreV1().ServiceAccounts(release).CreateToken(ctx, b.sa, &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("TokenRequest: %v", err)
			}
			sa := clientFor(t, tr.Status.Token)
			checkTakeOverAllowed(t, admin, sa, b.ns, b.podSel, b.leaseName)
			checkTakeOverForbidden(t, sa, b.ns, b.leaseName, leaseOth)
			t.Logf("FIGURE %s take-over RBAC checked in %v", dep, time.Since(start).Round(time.Millisecond))
		})
	}
}

// checkTakeOverAllowed makes, as sa, the take-over informers' requests: the two informers
// themselves (built as the binary builds them) must sync and hold exactly kube-controller-
// manager's Pod and Lease; then a LIST, a WATCH that sees a change admin makes, and a GET.
func checkTakeOverAllowed(t *testing.T, admin, sa kubernetes.Interface, ns, podSel, leaseName string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leaseSel := fields.OneTermEqualSelector("metadata.name", leaseName).String()

	pods := coreinformers.NewFilteredPodInformer(sa, ns, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = podSel })
	leases := coordinationinformers.NewFilteredLeaseInformer(sa, ns, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.FieldSelector = leaseSel })
	go pods.RunWithContext(ctx)
	go leases.RunWithContext(ctx)
	// A Role without list leaves the reflector retrying: the sync never comes. Without watch
	// the informers still sync (on their LIST) and then go stale: the WATCH below catches that.
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, leases.HasSynced) {
		t.Fatalf("take-over informers (Pods %s, Lease %s) not synced in 30s: the Role does not grant what they request", podSel, leaseName)
	}
	if keys := pods.GetStore().ListKeys(); len(keys) != 1 || keys[0] != ns+"/kube-controller-manager-cp1" {
		t.Errorf("Pod informer holds %v; want only %s/kube-controller-manager-cp1", keys, ns)
	}
	if keys := leases.GetStore().ListKeys(); len(keys) != 1 || keys[0] != ns+"/"+leaseName {
		t.Errorf("Lease informer holds %v; want only %s/%s", keys, ns, leaseName)
	}

	// The same requests one by one: LIST, then WATCH from the list's resourceVersion until a
	// change admin makes arrives.
	pl, err := sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: podSel})
	if err != nil || len(pl.Items) != 1 {
		t.Fatalf("LIST pods %s: %v (%d items, want 1)", podSel, err, len(pl.Items))
	}
	pw, err := sa.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: podSel, ResourceVersion: pl.ResourceVersion})
	if err != nil {
		t.Fatalf("WATCH pods %s: %v", podSel, err)
	}
	defer pw.Stop()
	ll, err := sa.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{FieldSelector: leaseSel})
	if err != nil || len(ll.Items) != 1 {
		t.Fatalf("LIST leases %s: %v (%d items, want 1)", leaseSel, err, len(ll.Items))
	}
	lw, err := sa.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{FieldSelector: leaseSel, ResourceVersion: ll.ResourceVersion})
	if err != nil {
		t.Fatalf("WATCH leases %s: %v", leaseSel, err)
	}
	defer lw.Stop()
	if _, err := sa.CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{}); err != nil {
		t.Fatalf("GET lease %s: %v", leaseName, err)
	}
	// A change to each, seen through the ServiceAccount's watch: a 200 that then ends in an
	// error event would pass the calls above.
	touch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"charttest/touched":%q}}}`, time.Now().Format(time.RFC3339Nano)))
	if _, err := admin.CoreV1().Pods(ns).Patch(ctx, "kube-controller-manager-cp1", types.MergePatchType, touch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoordinationV1().Leases(ns).Patch(ctx, leaseName, types.MergePatchType, touch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitModified(ctx, t, "pods "+podSel, pw, "kube-controller-manager-cp1")
	waitModified(ctx, t, "leases "+leaseSel, lw, leaseName)
}

// waitModified waits for a MODIFIED event of name on w, failing on an error event, a closed
// watch or ctx's end.
func waitModified(ctx context.Context, t *testing.T, what string, w watch.Interface, name string) {
	t.Helper()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("WATCH %s closed before the change arrived", what)
			}
			if ev.Type == watch.Error {
				t.Fatalf("WATCH %s: error event %v", what, apierrors.FromObject(ev.Object))
			}
			if m, err := metaName(ev.Object); err == nil && ev.Type == watch.Modified && m == name {
				return
			}
		case <-ctx.Done():
			t.Fatalf("WATCH %s: no change of %s seen: %v", what, name, ctx.Err())
		}
	}
}

func metaName(o any) (string, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return "", fmt.Errorf("%T has no metadata", o)
	}
	return m.GetName(), nil
}

// checkTakeOverForbidden: the Role reads one Lease by name and nothing else of the namespace
// but Pods.
func checkTakeOverForbidden(t *testing.T, sa kubernetes.Interface, ns, leaseName, other string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leases := sa.CoordinationV1().Leases(ns)
	otherSel := fields.OneTermEqualSelector("metadata.name", other).String()
	for what, call := range map[string]func() error{
		"GET lease " + other: func() error { _, err := leases.Get(ctx, other, metav1.GetOptions{}); return err },
		"LIST leases " + otherSel: func() error {
			_, err := leases.List(ctx, metav1.ListOptions{FieldSelector: otherSel})
			return err
		},
		"WATCH leases " + otherSel: func() error {
			w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: otherSel})
			if err == nil {
				w.Stop()
			}
			return err
		},
		"LIST leases (unfiltered)": func() error { _, err := leases.List(ctx, metav1.ListOptions{}); return err },
		"UPDATE lease " + leaseName: func() error {
			l, err := leases.Get(ctx, leaseName, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("GET before UPDATE: %w", err)
			}
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			return err
		},
		"LIST secrets": func() error { _, err := sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); return err },
		"GET secret":   func() error { _, err := sa.CoreV1().Secrets(ns).Get(ctx, "x", metav1.GetOptions{}); return err },
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s in %s: got %v, want Forbidden", what, ns, err)
		}
	}
}
