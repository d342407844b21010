package servicelb

import (
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
)

func poolObj(name string, age int64, addrs []string, mut ...func(*v1alpha1.IPAddressPoolSpec)) *v1alpha1.IPAddressPool {
	p := &v1alpha1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(age, 0))},
		Spec:       v1alpha1.IPAddressPoolSpec{Addresses: addrs},
	}
	for _, m := range mut {
		m(&p.Spec)
	}
	return p
}

func TestParsePoolsValidity(t *testing.T) {
	infos := parsePools([]*v1alpha1.IPAddressPool{
		poolObj("newer", 2, []string{"192.0.2.100-192.0.2.200"}),
		poolObj("older", 1, []string{"192.0.2.0/25"}),
		poolObj("reversed", 3, []string{"192.0.2.9-192.0.2.1"}),
		poolObj("self-overlap", 4, []string{"198.51.100.0/24", "198.51.100.7"}),
		poolObj("bad-selector", 5, []string{"203.0.113.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) {
			s.ServiceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}
		}),
		poolObj("empty", 6, nil),
	})
	for name, want := range map[string]string{
		"older":        v1alpha1.ReasonValid,
		"newer":        v1alpha1.ReasonOverlapping,
		"reversed":     v1alpha1.ReasonInvalidAddresses,
		"self-overlap": v1alpha1.ReasonInvalidAddresses,
		"bad-selector": v1alpha1.ReasonInvalidSelector,
		"empty":        v1alpha1.ReasonInvalidAddresses,
	} {
		pi := infos[name]
		if pi.reason != want || pi.valid != (want == v1alpha1.ReasonValid) {
			t.Errorf("%s: valid=%v reason=%s (%s), want %s", name, pi.valid, pi.reason, pi.message, want)
		}
	}
	if !strings.Contains(infos["newer"].message, "older") {
		t.Errorf("overlap message does not name the older pool: %s", infos["newer"].message)
	}
}

func TestCandidatePools(t *testing.T) {
	infos := parsePools([]*v1alpha1.IPAddressPool{
		poolObj("b-default", 1, []string{"10.0.1.0/24"}),
		poolObj("a-default", 2, []string{"10.0.2.0/24"}),
		poolObj("first", 3, []string{"10.0.3.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) { s.Priority = 0 }),
		poolObj("last", 4, []string{"10.0.4.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) { s.Priority = 10 }),
		poolObj("manual", 5, []string{"10.0.5.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) { s.AutoAssign = ptr.To(false) }),
		poolObj("team-ns", 6, []string{"10.0.6.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) { s.Namespaces = []string{"team"} }),
		poolObj("prod-ns", 7, []string{"10.0.7.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) {
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
		}),
		poolObj("public-svc", 8, []string{"10.0.8.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) {
			s.ServiceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"exposure": "public"}}
		}),
		poolObj("broken", 9, []string{"10.0.1.0/24"}), // overlaps b-default
	})
	svc := func(ns string, lbls map[string]string, ann map[string]string) *v1.Service {
		return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s", Labels: lbls, Annotations: ann}}
	}
	for _, tc := range []struct {
		name     string
		svc      *v1.Service
		nsLabels labels.Set
		want     []string
		err      string
	}{
		{name: "defaults by priority then name", svc: svc("default", nil, nil),
			want: []string{"a-default", "b-default", "first", "last"}},
		{name: "namespace list", svc: svc("team", nil, nil),
			want: []string{"a-default", "b-default", "first", "team-ns", "last"}},
		{name: "namespace selector", svc: svc("x", nil, nil), nsLabels: labels.Set{"env": "prod"},
			want: []string{"a-default", "b-default", "first", "prod-ns", "last"}},
		{name: "service selector", svc: svc("x", map[string]string{"exposure": "public"}, nil),
			want: []string{"a-default", "b-default", "first", "public-svc", "last"}},
		{name: "named pool ignores autoAssign", svc: svc("x", nil, map[string]string{AnnotationAddressPool: "manual"}),
			want: []string{"manual"}},
		{name: "named pool must admit", svc: svc("x", nil, map[string]string{AnnotationAddressPool: "team-ns"}),
			err: "does not admit"},
		{name: "named pool must exist", svc: svc("x", nil, map[string]string{AnnotationAddressPool: "nope"}),
			err: "does not exist"},
		{name: "named pool must be valid", svc: svc("x", nil, map[string]string{AnnotationAddressPool: "broken"}),
			err: "not valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := candidatePools(infos, tc.svc, tc.nsLabels)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
