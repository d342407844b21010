package namespace_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestNamespaceRecreatedDuringDeletion forces the race of a deletion sync with the namespace
// being finalized by another writer (a second controller in a split brain, or an operator)
// and created again under the same name with new content. The controller's client is slowed
// to 4 requests a second, so that one sync over the cluster's resource types takes seconds
// and is still running when the new namespace and its content appear. Nothing new may be
// deleted: the sync checks the live namespace before every page of deletes.
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func TestNamespaceRecreatedDuringDeletion(t *testing.T) {
	testenv.Require(t, env)
	client := env.Client(t)
	ctrl := env.StartLeading(t, controller, "slow", "--kube-api-qps=4", "--kube-api-burst=1")

	name := newNamespace(t, client, "recreated")
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	const old = 30
	createConfigMaps(t, client, name, old)
	createRoles(t, client, name, "old", 10)
	deleteNamespace(t, client, name)
	poll(t, goneTimeout, "the controller to start deleting", func(context.Context) (bool, error) {
		return countConfigMaps(t, client, name) < old, nil
	})

	// Another writer finalizes the namespace while the sync runs: it goes at once, whatever
	// is left of its content stays in storage under the name.
	cur, err := client.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Finalizers = nil
	if _, err := client.CoreV1().Namespaces().Finalize(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, client, name)
	// Every audit event from here on is about the new namespace.
	before, err := env.Audit(nil)
	if err != nil {
		t.Fatal(err)
	}
	recreated, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	const fresh = 20
	parallel(t, fresh, func(ctx context.Context, i int) error {
		_, err := client.CoreV1().ConfigMaps(name).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("new-%02d", i)}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		_, err = client.CoreV1().Secrets(name).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("new-%02d", i)}}, metav1.CreateOptions{})
		return err
	})
	createRoles(t, client, name, "new", fresh)
	t.Logf("namespace %s recreated (uid %s) and filled %s after the other writer finalized it",
		name, recreated.UID, time.Since(since).Round(time.Millisecond))

	// Sentinel: the sync noticed and stopped. The slowed client then needs a moment for
	// what it had queued; give it a few seconds more before looking.
	stopped := func() float64 {
		return ctrl.Metric(`kcm_split_namespace_deletion_stopped_total{reason="replaced"}`) +
			ctrl.Metric(`kcm_split_namespace_deletion_stopped_total{reason="gone"}`)
	}
	poll(t, goneTimeout, "the sync to stop on the replaced namespace", func(context.Context) (bool, error) {
		return stopped() >= 1, nil
	})
	time.Sleep(5 * time.Second)

	cms, err := client.CoreV1().ConfigMaps(name).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := client.CoreV1().Secrets(name).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roles, err := client.RbacV1().Roles(name).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	intact := func(kind string, names []string, deleting []string) {
		n := 0
		for _, s := range names {
			if strings.HasPrefix(s, "new-") {
				n++
			}
		}
		if n != fresh || len(deleting) > 0 {
			t.Errorf("%s of the new namespace: %d of %d left, being deleted: %v", kind, n, fresh, deleting)
		}
	}
	var names, deleting []string
	for _, o := range cms.Items {
		names = append(names, o.Name)
		if o.DeletionTimestamp != nil {
			deleting = append(deleting, o.Name)
		}
	}
	intact("ConfigMaps", names, deleting)
	names, deleting = nil, nil
	for _, o := range secrets.Items {
		names = append(names, o.Name)
	}
	intact("Secrets", names, nil)
	names = nil
	for _, o := range roles.Items {
		names = append(names, o.Name)
	}
	intact("Roles", names, nil)
	t.Logf("left in the new namespace: %d ConfigMaps (%d of the old one's), %d Secrets, %d Roles; stopped syncs %v",
		len(cms.Items), len(cms.Items)-fresh, len(secrets.Items), len(roles.Items), stopped())

	// The audit log: no delete of the controller's reached a new object by name, and the
	// namespace itself was not written to after it was recreated.
	all, err := env.Audit(nil)
	if err != nil {
		t.Fatal(err)
	}
	mine := testenv.ByUserAgentPrefix(controller.UserAgentPrefix())
	for _, ev := range all[len(before):] {
		if !ev.IsWrite() || !mine(ev) {
			continue
		}
		if ev.ObjectRef.Namespace == name && strings.HasPrefix(ev.ObjectRef.Name, "new-") {
			t.Errorf("the controller wrote %s %s/%s in the new namespace", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Name)
		}
		if ev.ObjectRef.Resource == "namespaces" && ev.ObjectRef.Name == name {
			t.Errorf("the controller wrote %s %s on the new namespace", ev.Verb, ev.ObjectRef.Subresource)
		}
	}
}

func createRoles(t *testing.T, client kubernetes.Interface, ns, prefix string, n int) {
	t.Helper()
	parallel(t, n, func(ctx context.Context, i int) error {
		_, err := client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", prefix, i)}}, metav1.CreateOptions{})
		return err
	})
}
