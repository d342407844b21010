package quota

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestResourceFor(t *testing.T) {
	tests := []struct {
		name string
		gr   schema.GroupResource
		ok   bool
	}{
		{"pods", podsResource, true},
		{"requests.cpu", podsResource, true},
		{"limits.memory", podsResource, true},
		{"requests.hugepages-1Gi", podsResource, true},
		{"requests.example.com/gpu", podsResource, true},
		{"requests.kubernetes.io/foo", schema.GroupResource{}, false},
		{"count/pods", podsResource, true},
		{"services.nodeports", servicesResource, true},
		{"count/services", servicesResource, true},
		{"requests.storage", pvcsResource, true},
		{"gold.storageclass.storage.k8s.io/persistentvolumeclaims", pvcsResource, true},
		{"configmaps", schema.GroupResource{Resource: "configmaps"}, true},
		{"resourcequotas", schema.GroupResource{Resource: "resourcequotas"}, true},
		{"count/configmaps", schema.GroupResource{Resource: "configmaps"}, true},
		{"count/deployments.apps", schema.GroupResource{Group: "apps", Resource: "deployments"}, true},
		{"count/widgets.kcm-split.example.com", schema.GroupResource{Group: "kcm-split.example.com", Resource: "widgets"}, true},
		{"count/", schema.GroupResource{}, false},
		// Upstream never counts Events, nor virtual types.
		{"count/events", schema.GroupResource{}, false},
		{"count/events.events.k8s.io", schema.GroupResource{}, false},
		{"count/tokenreviews.authentication.k8s.io", schema.GroupResource{}, false},
		{"example.com/unknown", schema.GroupResource{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gr, ok := resourceFor(v1.ResourceName(tt.name), DefaultOptions().Claims)
			if ok != tt.ok || gr != tt.gr {
				t.Fatalf("got %v %v, want %v %v", gr, ok, tt.gr, tt.ok)
			}
			if ok && gr != podsResource && gr != servicesResource && gr != pvcsResource && tt.name[:6] == "count/" && countName(gr) != v1.ResourceName(tt.name) {
				t.Fatalf("countName(%v) = %s", gr, countName(gr))
			}
		})
	}
}

// Only types that can be created, listed, watched and deleted are counted, as upstream.
func TestQuotable(t *testing.T) {
	all := []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	for _, tc := range []struct {
		group string
		r     metav1.APIResource
		want  bool
	}{
		{"", metav1.APIResource{Name: "configmaps", Verbs: all}, true},
		{"apps", metav1.APIResource{Name: "deployments", Verbs: all}, true},
		{"apps", metav1.APIResource{Name: "deployments/scale", Verbs: all}, false},
		{"", metav1.APIResource{Name: "events", Verbs: all}, false},
		{"events.k8s.io", metav1.APIResource{Name: "events", Verbs: all}, false},
		{"example.com", metav1.APIResource{Name: "readonly", Verbs: []string{"get", "list", "watch"}}, false},
		{"example.com", metav1.APIResource{Name: "undeletable", Verbs: []string{"create", "get", "list", "watch"}}, false},
		{"example.com", metav1.APIResource{Name: "unwatchable", Verbs: []string{"create", "delete", "list"}}, false},
		{"", metav1.APIResource{Name: "bindings", Verbs: []string{"create"}}, false},
	} {
		if got := quotable(tc.group, tc.r); got != tc.want {
			t.Errorf("quotable(%q, %s %v) = %t, want %t", tc.group, tc.r.Name, tc.r.Verbs, got, tc.want)
		}
	}
}
