package leasestate

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

const ns, lease = "kube-system", "node-lifecycle-controller"

func newStore(t *testing.T, client *fake.Clientset, maxBytes int) *Store {
	t.Helper()
	s, err := New(client.CoreV1().ConfigMaps(ns), Name(lease, "-state"), Options{Key: "state.json", MaxBytes: maxBytes, ManagedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func writes(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		if v := a.GetVerb(); v == "create" || v == "update" {
			out = append(out, v)
		}
	}
	return out
}

func TestNewNeedsClientNameAndKey(t *testing.T) {
	cms := fake.NewClientset().CoreV1().ConfigMaps(ns)
	for _, c := range []struct {
		name, key string
	}{{"", "k"}, {"n", ""}} {
		if _, err := New(cms, c.name, Options{Key: c.key}); err == nil {
			t.Errorf("New(%q, key %q) accepted", c.name, c.key)
		}
	}
	if s, err := New(cms, "n", Options{Key: "k"}); err != nil || s.MaxBytes() != DefaultMaxBytes {
		t.Fatalf("defaults: %v, max %d", err, s.MaxBytes())
	}
}

// TestCreateThenUpdateConditioned: absent, the first Save creates (with the label); later
// Saves update the ConfigMap carrying the resourceVersion last written; a fresh Store reads
// back the last value.
func TestCreateThenUpdateConditioned(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	s := newStore(t, client, 0)
	if err := s.Save(ctx, []byte("x")); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("Save before Load: %v, want ErrNotLoaded", err)
	}
	if v, found, err := s.Load(ctx); err != nil || found || v != nil || !s.Loaded() {
		t.Fatalf("Load of absent: %q %v %v loaded=%v", v, found, err, s.Loaded())
	}
	if err := s.Save(ctx, []byte("one")); err != nil {
		t.Fatal(err)
	}
	var sentRV string
	client.PrependReactor("update", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		sentRV = a.(clienttesting.UpdateAction).GetObject().(*v1.ConfigMap).ResourceVersion
		return false, nil, nil
	})
	rv := s.ResourceVersion()
	if err := s.Save(ctx, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if sentRV != rv {
		t.Fatalf("update carried resourceVersion %q, want the last written %q", sentRV, rv)
	}
	if w := writes(client); len(w) != 2 || w[0] != "create" || w[1] != "update" {
		t.Fatalf("writes %v, want create, update", w)
	}
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, lease+"-state", metav1.GetOptions{})
	if err != nil || cm.Labels[ManagedByLabel] != "test" || cm.Data["state.json"] != "two" {
		t.Fatalf("stored %v (%v)", cm, err)
	}
	next := newStore(t, client, 0)
	if v, found, err := next.Load(ctx); err != nil || !found || string(v) != "two" {
		t.Fatalf("next holder read %q %v %v", v, found, err)
	}
}

// TestChangedByAnotherWriterUnloads: a conflict, or a ConfigMap created or deleted meanwhile,
// is ErrChanged and unloads the Store (no blind retry); a Load makes Save possible again.
func TestChangedByAnotherWriterUnloads(t *testing.T) {
	ctx := context.Background()
	gr := schema.GroupResource{Resource: "configmaps"}
	for name, c := range map[string]struct {
		existing bool
		verb     string
		err      error
	}{
		"conflict":       {existing: true, verb: "update", err: apierrors.NewConflict(gr, "x", errors.New("changed"))},
		"deleted":        {existing: true, verb: "update", err: apierrors.NewNotFound(gr, "x")},
		"created by now": {verb: "create", err: apierrors.NewAlreadyExists(gr, "x")},
	} {
		t.Run(name, func(t *testing.T) {
			var objs []runtime.Object
			if c.existing {
				objs = append(objs, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lease + "-state"}, Data: map[string]string{"state.json": "old"}})
			}
			client := fake.NewClientset(objs...)
			s := newStore(t, client, 0)
			if _, _, err := s.Load(ctx); err != nil {
				t.Fatal(err)
			}
			failing := true
			client.PrependReactor(c.verb, "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
				if failing {
					return true, nil, c.err
				}
				return false, nil, nil
			})
			err := s.Save(ctx, []byte("new"))
			if !errors.Is(err, ErrChanged) || s.Loaded() {
				t.Fatalf("Save: %v, loaded %v; want ErrChanged, unloaded", err, s.Loaded())
			}
			if err := s.Save(ctx, []byte("new")); !errors.Is(err, ErrNotLoaded) {
				t.Fatalf("second Save: %v, want ErrNotLoaded", err)
			}
			failing = false
			if _, _, err := s.Load(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.Save(ctx, []byte("new")); err != nil {
				t.Fatalf("Save after Load: %v", err)
			}
		})
	}
}

// TestUnreadableNeverOverwritten: a failed read leaves the Store unloaded, so nothing a
// predecessor kept is overwritten by a holder that could not read it; other write errors are
// returned as they are and keep it loaded.
func TestUnreadableNeverOverwritten(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lease + "-state"}, Data: map[string]string{"state.json": "kept"}})
	client.PrependReactor("get", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "x", errors.New("no"))
	})
	s := newStore(t, client, 0)
	if _, _, err := s.Load(ctx); !apierrors.IsForbidden(err) || s.Loaded() {
		t.Fatalf("Load: %v, loaded %v", err, s.Loaded())
	}
	if err := s.Save(ctx, []byte("mine")); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("Save: %v", err)
	}
	if w := writes(client); len(w) != 0 {
		t.Fatalf("writes %v after a failed read", w)
	}

	other := fake.NewClientset()
	other.PrependReactor("create", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	s = newStore(t, other, 0)
	if _, _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, []byte("mine")); err == nil || errors.Is(err, ErrChanged) || !s.Loaded() {
		t.Fatalf("Save: %v, loaded %v; want the error, still loaded", err, s.Loaded())
	}
}

// TestBoundAndOtherKeys: a value over the bound is refused before any write; a ConfigMap
// without the key loads as not found; Save keeps only its key.
func TestBoundAndOtherKeys(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lease + "-state"}, Data: map[string]string{"other": "y"}})
	s := newStore(t, client, 8)
	if v, found, err := s.Load(ctx); err != nil || found || v != nil {
		t.Fatalf("Load: %q %v %v", v, found, err)
	}
	if err := s.Save(ctx, []byte(strings.Repeat("x", 9))); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Save over bound: %v", err)
	}
	if w := writes(client); len(w) != 0 {
		t.Fatalf("writes %v over the bound", w)
	}
	if err := s.Save(ctx, []byte("12345678")); err != nil {
		t.Fatal(err)
	}
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, lease+"-state", metav1.GetOptions{})
	if err != nil || len(cm.Data) != 1 || cm.Data["state.json"] != "12345678" {
		t.Fatalf("stored %v (%v)", cm.Data, err)
	}
	s.Unload()
	if s.Loaded() || s.ResourceVersion() != "" {
		t.Fatal("Unload kept state")
	}
}
