package poolsource

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/services/servicelb/internal/testobj"
)

func TestParsePoolsValidity(t *testing.T) {
	infos := parseAll([]*v1alpha1.IPAddressPool{
		testobj.Pool("newer", 2, []string{"192.0.2.100-192.0.2.200"}),
		testobj.Pool("older", 1, []string{"192.0.2.0/25"}),
		testobj.Pool("reversed", 3, []string{"192.0.2.9-192.0.2.1"}),
		testobj.Pool("self-overlap", 4, []string{"198.51.100.0/24", "198.51.100.7"}),
		testobj.Pool("bad-selector", 5, []string{"203.0.113.0/24"}, func(s *v1alpha1.IPAddressPoolSpec) {
			s.ServiceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}
		}),
		testobj.Pool("empty", 6, nil),
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
		if pi.Reason != want || pi.Valid != (want == v1alpha1.ReasonValid) {
			t.Errorf("%s: valid=%v reason=%s (%s), want %s", name, pi.Valid, pi.Reason, pi.Message, want)
		}
	}
	if !strings.Contains(infos["newer"].Message, "older") {
		t.Errorf("overlap message does not name the older pool: %s", infos["newer"].Message)
	}
}

// parseAll parses kcm-split pools and checks them for overlaps.
func parseAll(objs []*v1alpha1.IPAddressPool) map[string]*Pool {
	var parsed []Parsed
	for _, o := range objs {
		parsed = append(parsed, Parsed{Created: o.CreationTimestamp, Pool: ParseKCMSplit(o)})
	}
	return CheckOverlaps(parsed)
}
