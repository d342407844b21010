package benchkit

import (
	"encoding/json"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CacheBytes returns the heap bytes one cached object costs: n copies of proto, each decoded
// afresh from JSON (so that, as objects listed from the apiserver, none shares a string with
// another), passed through transform (nil keeps them whole) and held as an informer's store
// holds them. The untransformed copies are garbage by the time the heap is read. newObj
// returns an empty object of proto's type to decode into.
func CacheBytes[T any](n int, proto T, newObj func() T, transform func(any) (any, error)) (float64, error) {
	raw, err := json.Marshal(proto)
	if err != nil {
		return 0, err
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	store := make([]any, n)
	for i := range store {
		obj := newObj()
		if err := json.Unmarshal(raw, obj); err != nil {
			return 0, err
		}
		var kept any = obj
		if transform != nil {
			if kept, err = transform(obj); err != nil {
				return 0, err
			}
		}
		store[i] = kept
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(store)
	// The slice of interfaces itself is the store's index, not the object: leave it out.
	slice := float64(n * 16)
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc) - slice) / float64(n), nil
}

// Cached names one type a binary caches and the transform its informer applies to it.
type Cached struct {
	Kind      string // Pod, Node, Service, Namespace or ConfigMap
	Transform func(any) (any, error)
	// Metadata says the binary watches Kind through a metadata informer: the apiserver lists
	// only the object's metadata (*metav1.PartialObjectMetadata), and that is what is measured.
	Metadata bool
}

// realistic returns a realistic object of kind, as the apiserver lists it (managedFields
// included), and an empty one to decode into.
func realistic(kind string) (proto any, empty func() any, ok bool) {
	switch kind {
	case "Pod":
		p := RealisticPod("shop", "web-7d9f8b6c5d-abcde", "web", "node-00001", "10.64.0.1")
		WithManagedFields(&p.ObjectMeta)
		return p, func() any { return &corev1.Pod{} }, true
	case "Node":
		n := RealisticNode("node-00001", "zone-a")
		WithManagedFields(&n.ObjectMeta)
		return n, func() any { return &corev1.Node{} }, true
	case "Service":
		s := RealisticService("shop", "web")
		WithManagedFields(&s.ObjectMeta)
		return s, func() any { return &corev1.Service{} }, true
	case "Namespace":
		ns := &corev1.Namespace{}
		ns.Name = "shop"
		ns.Labels = map[string]string{"team": "payments", "kubernetes.io/metadata.name": "shop"}
		WithManagedFields(&ns.ObjectMeta)
		return ns, func() any { return &corev1.Namespace{} }, true
	case "ConfigMap":
		cm := RealisticConfigMap("shop", "web-config")
		WithManagedFields(&cm.ObjectMeta)
		return cm, func() any { return &corev1.ConfigMap{} }, true
	}
	return nil, nil, false
}

// ReportCacheBytes logs (never asserts) the heap bytes one object of each kind costs as listed
// and as binary caches it after its transform: each service's TestCacheBytesPerObject, which
// deploy/tests/scale/README.md tabulates.
func ReportCacheBytes(t testing.TB, binary string, kinds ...Cached) {
	t.Helper()
	const n = 2000
	for _, k := range kinds {
		proto, empty, ok := realistic(k.Kind)
		if !ok {
			t.Fatalf("no realistic %s", k.Kind)
		}
		kind := k.Kind
		if k.Metadata {
			proto, empty = metadataOnly(proto)
			kind += " (metadata)"
		}
		full, err := CacheBytes(n, proto, empty, nil)
		if err != nil {
			t.Fatal(err)
		}
		kept, err := CacheBytes(n, proto, empty, k.Transform)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s %-10s full %6.0f B  cached %6.0f B  (%.2fx)", binary, kind, full, kept, kept/full)
	}
}

// metadataOnly returns what a metadata informer lists of proto: its metadata, as a
// PartialObjectMetadata, and an empty one to decode into.
func metadataOnly(proto any) (any, func() any) {
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}}
	if o, ok := proto.(metav1.ObjectMetaAccessor); ok {
		m.ObjectMeta = *o.GetObjectMeta().(*metav1.ObjectMeta)
	}
	return m, func() any { return &metav1.PartialObjectMetadata{} }
}
