package endpoints

import (
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
)

func TestDesiredLabels(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  *v1.Service
		want map[string]string
	}{
		{name: "no labels", svc: testobj.Service("s"), want: map[string]string{LabelManagedBy: ComponentName}},
		{
			name: "service labels copied",
			svc:  testobj.Service("s", func(s *v1.Service) { s.Labels = map[string]string{"team": "a"} }),
			want: map[string]string{"team": "a", LabelManagedBy: ComponentName},
		},
		{
			name: "headless marker for a headless service",
			svc:  testobj.Service("s", func(s *v1.Service) { s.Spec.ClusterIP = v1.ClusterIPNone }),
			want: map[string]string{v1.IsHeadlessService: "", LabelManagedBy: ComponentName},
		},
		{
			name: "a headless marker on a service with a cluster IP is not copied",
			svc:  testobj.Service("s", func(s *v1.Service) { s.Labels = map[string]string{v1.IsHeadlessService: ""} }),
			want: map[string]string{LabelManagedBy: ComponentName},
		},
		{
			name: "managed-by cannot be overridden by the service",
			svc:  testobj.Service("s", func(s *v1.Service) { s.Labels = map[string]string{LabelManagedBy: "someone"} }),
			want: map[string]string{LabelManagedBy: ComponentName},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := maps.Clone(tc.svc.Labels)
			if diff := cmp.Diff(tc.want, desiredLabels(tc.svc)); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tc.svc.Labels); diff != "" {
				t.Errorf("service labels modified (-before +after):\n%s", diff)
			}
		})
	}
}

func TestLabelsUpToDate(t *testing.T) {
	managed := func(kv ...string) map[string]string {
		m := map[string]string{LabelManagedBy: ComponentName}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name             string
		current, desired map[string]string
		want             bool
	}{
		{name: "equal", current: managed("a", "1"), desired: managed("a", "1"), want: true},
		{name: "value differs", current: managed("a", "1"), desired: managed("a", "2"), want: false},
		{name: "extra label on endpoints", current: managed("a", "1", "b", "2"), desired: managed("a", "1"), want: false},
		{name: "missing label on endpoints", current: managed(), desired: managed("a", "1"), want: false},
		{name: "not managed yet", current: map[string]string{"a": "1"}, desired: managed("a", "1"), want: false},
		{name: "managed by someone else", current: map[string]string{LabelManagedBy: "x"}, desired: managed(), want: false},
		{name: "headless marker missing is tolerated", current: managed(), desired: managed(v1.IsHeadlessService, ""), want: true},
		{name: "stray headless marker is tolerated", current: managed(v1.IsHeadlessService, ""), desired: managed(), want: true},
		{name: "nil current", current: nil, desired: managed(), want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := labelsUpToDate(tc.current, tc.desired); got != tc.want {
				t.Errorf("labelsUpToDate = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestOverCapacityUpToDate(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		truncated   bool
		want        bool
	}{
		{name: "under, no annotation", want: true},
		{name: "under, annotated", annotations: map[string]string{v1.EndpointsOverCapacity: overCapacityTruncated}, want: false},
		{name: "under, other value", annotations: map[string]string{v1.EndpointsOverCapacity: "warning"}, want: false},
		{name: "over, annotated", annotations: map[string]string{v1.EndpointsOverCapacity: overCapacityTruncated}, truncated: true, want: true},
		{name: "over, not annotated", truncated: true, want: false},
		{name: "over, other value", annotations: map[string]string{v1.EndpointsOverCapacity: "warning"}, truncated: true, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := overCapacityUpToDate(tc.annotations, tc.truncated); got != tc.want {
				t.Errorf("overCapacityUpToDate = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSubsetsEqual(t *testing.T) {
	base := func() []v1.EndpointSubset {
		return []v1.EndpointSubset{{
			Addresses:         []v1.EndpointAddress{testobj.Address("a", "10.1.0.1")},
			NotReadyAddresses: []v1.EndpointAddress{testobj.Address("b", "10.1.0.2")},
			Ports:             []v1.EndpointPort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, AppProtocol: new("http")}},
		}}
	}
	for _, tc := range []struct {
		name   string
		mutate func([]v1.EndpointSubset) []v1.EndpointSubset
		want   bool
	}{
		{name: "identical", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset { return s }, want: true},
		{name: "target resourceVersion ignored", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset {
			s[0].Addresses[0].TargetRef.ResourceVersion = "42"
			return s
		}, want: true},
		{name: "ip", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset { s[0].Addresses[0].IP = "10.9.9.9"; return s }},
		{name: "hostname", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset { s[0].Addresses[0].Hostname = "h"; return s }},
		{name: "nodeName value", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset { s[0].Addresses[0].NodeName = new("n2"); return s }},
		{name: "nodeName absent", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset { s[0].Addresses[0].NodeName = nil; return s }},
		{name: "target uid", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset { s[0].Addresses[0].TargetRef.UID = "x"; return s }},
		{name: "target absent", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset { s[0].Addresses[0].TargetRef = nil; return s }},
		{name: "readiness", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset {
			s[0].Addresses, s[0].NotReadyAddresses = s[0].NotReadyAddresses, s[0].Addresses
			return s
		}},
		{name: "port number", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset { s[0].Ports[0].Port = 81; return s }},
		{name: "port name", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset { s[0].Ports[0].Name = "x"; return s }},
		{name: "port protocol", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset { s[0].Ports[0].Protocol = v1.ProtocolUDP; return s }},
		{name: "appProtocol", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset { s[0].Ports[0].AppProtocol = nil; return s }},
		{name: "extra subset", mutate: func(s []v1.EndpointSubset) []v1.EndpointSubset { return append(s, s[0]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := subsetsEqual(base(), tc.mutate(base())); got != tc.want {
				t.Errorf("subsetsEqual = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("nil and empty are equal", func(t *testing.T) {
		a, b := base(), base()
		a[0].NotReadyAddresses, b[0].NotReadyAddresses = nil, []v1.EndpointAddress{}
		if !subsetsEqual(a, b) || !subsetsEqual(nil, []v1.EndpointSubset{}) {
			t.Error("nil and empty lists compare unequal")
		}
	})
}

// subsetsEqual compares fields one by one; if the API grows a field, this fails so that the
// comparison is extended rather than silently ignoring the new field.
func TestSubsetsEqualKnowsEveryField(t *testing.T) {
	for typ, want := range map[reflect.Type]int{
		reflect.TypeFor[v1.EndpointSubset]():  3,
		reflect.TypeFor[v1.EndpointAddress](): 4,
		reflect.TypeFor[v1.EndpointPort]():    4,
	} {
		if got := typ.NumField(); got != want {
			t.Errorf("%s has %d fields, subsetsEqual knows %d", typ, got, want)
		}
	}
}

func TestBuildEndpoints(t *testing.T) {
	svc := testobj.Service("s", func(s *v1.Service) { s.Labels = map[string]string{"team": "a"} })
	subsets := []v1.EndpointSubset{{Addresses: []v1.EndpointAddress{testobj.Address("a", "10.1.0.1")}, Ports: []v1.EndpointPort{testobj.Port("http", 8080)}}}
	trigger := time.Date(2026, 3, 4, 5, 6, 7, 8, time.FixedZone("x", 3600))

	t.Run("new", func(t *testing.T) {
		got := buildEndpoints(nil, svc, subsets, false, trigger)
		want := &v1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:   testobj.NS,
				Name:        "s",
				Labels:      map[string]string{"team": "a", LabelManagedBy: ComponentName},
				Annotations: map[string]string{v1.EndpointsLastChangeTriggerTime: "2026-03-04T04:06:07.000000008Z"},
			},
			Subsets: subsets,
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("endpoints (-want +got):\n%s", diff)
		}
	})

	t.Run("existing keeps its metadata and is not modified", func(t *testing.T) {
		current := &v1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: testobj.NS, Name: "s", ResourceVersion: "7", UID: "ep-uid",
				Labels: map[string]string{"stray": "x", LabelManagedBy: ComponentName},
				Annotations: map[string]string{
					"other":                           "kept",
					v1.EndpointsOverCapacity:          overCapacityTruncated,
					v1.EndpointsLastChangeTriggerTime: "old",
				},
			},
		}
		before := current.DeepCopy()
		got := buildEndpoints(current, svc, subsets, false, time.Time{})
		if diff := cmp.Diff(before, current); diff != "" {
			t.Fatalf("current modified (-before +after):\n%s", diff)
		}
		want := &v1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: testobj.NS, Name: "s", ResourceVersion: "7", UID: "ep-uid",
				Labels:      map[string]string{"team": "a", LabelManagedBy: ComponentName},
				Annotations: map[string]string{"other": "kept"},
			},
			Subsets: subsets,
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("endpoints (-want +got):\n%s", diff)
		}
	})

	t.Run("truncated", func(t *testing.T) {
		got := buildEndpoints(nil, svc, subsets, true, time.Time{})
		if got.Annotations[v1.EndpointsOverCapacity] != overCapacityTruncated {
			t.Errorf("annotations = %v, want over-capacity truncated", got.Annotations)
		}
	})
}

func TestUpToDate(t *testing.T) {
	svc := testobj.Service("s")
	subsets := []v1.EndpointSubset{{
		Addresses: []v1.EndpointAddress{testobj.Address("a", "10.1.0.1"), testobj.Address("b", "10.1.0.2")},
		Ports:     []v1.EndpointPort{testobj.Port("http", 8080), testobj.Port("admin", 9000)},
	}}
	written := buildEndpoints(nil, svc, subsets, false, time.Now())
	if !upToDate(written, svc, subsets, false) {
		t.Fatal("what buildEndpoints wrote is not up to date")
	}
	t.Run("same content in another layout", func(t *testing.T) {
		other := written.DeepCopy()
		other.Subsets = []v1.EndpointSubset{
			{Addresses: []v1.EndpointAddress{testobj.Address("b", "10.1.0.2")}, Ports: []v1.EndpointPort{testobj.Port("admin", 9000), testobj.Port("http", 8080)}},
			{Addresses: []v1.EndpointAddress{testobj.Address("a", "10.1.0.1")}, Ports: []v1.EndpointPort{testobj.Port("http", 8080), testobj.Port("admin", 9000)}},
		}
		if !upToDate(other, svc, subsets, false) {
			t.Error("same content in another layout is not up to date")
		}
	})
	t.Run("trigger time alone does not matter", func(t *testing.T) {
		other := written.DeepCopy()
		delete(other.Annotations, v1.EndpointsLastChangeTriggerTime)
		if !upToDate(other, svc, subsets, false) {
			t.Error("missing trigger time made it out of date")
		}
	})
	t.Run("truncation flag matters", func(t *testing.T) {
		if upToDate(written, svc, subsets, true) {
			t.Error("missing over-capacity annotation not noticed")
		}
	})
	t.Run("labels matter", func(t *testing.T) {
		other := written.DeepCopy()
		other.Labels["stray"] = "x"
		if upToDate(other, svc, subsets, false) {
			t.Error("stray label not noticed")
		}
	})
}
