package pvbinder

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCountMetrics(t *testing.T) {
	api := newAPIServer(makePV("a", "1Gi"), makePV("b", "1Gi", pvClass("gold")), makeClaim("c", "1Gi"), makeClaim("d", "1Gi", claimClassOpt("gold"), claimSelector(map[string]string{"no": "match"})))
	f := newFixture(t, api)
	f.settle()
	want := `
# HELP pv_collector_bound_pv_count Gauge measuring number of persistent volume currently bound
# TYPE pv_collector_bound_pv_count gauge
pv_collector_bound_pv_count{storage_class=""} 1
# HELP pv_collector_bound_pvc_count Gauge measuring number of persistent volume claim currently bound
# TYPE pv_collector_bound_pvc_count gauge
pv_collector_bound_pvc_count{namespace="ns",storage_class="",volume_attributes_class=""} 1
# HELP pv_collector_total_pv_count Gauge measuring total number of persistent volumes
# TYPE pv_collector_total_pv_count gauge
pv_collector_total_pv_count{plugin_name="kubernetes.io/host-path",volume_mode="Filesystem"} 2
# HELP pv_collector_unbound_pv_count Gauge measuring number of persistent volume currently unbound
# TYPE pv_collector_unbound_pv_count gauge
pv_collector_unbound_pv_count{storage_class="gold"} 1
# HELP pv_collector_unbound_pvc_count Gauge measuring number of persistent volume claim currently unbound
# TYPE pv_collector_unbound_pvc_count gauge
pv_collector_unbound_pvc_count{namespace="ns",storage_class="gold",volume_attributes_class=""} 1
`
	if err := testutil.GatherAndCompare(f.registry, strings.NewReader(want),
		"pv_collector_bound_pv_count", "pv_collector_unbound_pv_count", "pv_collector_bound_pvc_count",
		"pv_collector_unbound_pvc_count", "pv_collector_total_pv_count"); err != nil {
		t.Error(err)
	}
}
