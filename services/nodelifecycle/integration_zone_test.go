package nodelifecycle_test

// The full-disruption drill: two zones of two kwok Nodes each, one kwok per zone. Zone a's
// kwok is frozen, so all of a's Leases stop while zone b stays healthy: a is in full
// disruption, the case --zone-full-disruption-eviction-rate is about. Timings are logged,
// never asserted.

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// zoneDrill is two zones, "zone-<prefix>-a" and "zone-<prefix>-b", each of two Nodes played
// by its own kwok.
type zoneDrill struct {
	zones map[string]string // group -> zone label value
	nodes map[string][]string
	kwoks map[string]*testenv.Process
}

func newZoneDrill(t *testing.T, prefix string) *zoneDrill {
	t.Helper()
	client := env.Client(t)
	d := &zoneDrill{zones: map[string]string{}, nodes: map[string][]string{}, kwoks: map[string]*testenv.Process{}}
	for _, g := range []string{"a", "b"} {
		d.zones[g] = "zone-" + prefix + "-" + g
		for i := 1; i <= 2; i++ {
			name := prefix + "-" + g + strconv.Itoa(i)
			d.nodes[g] = append(d.nodes[g], name)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				drillLabel: prefix, drillGroupLabel: prefix + "-" + g,
				corev1.LabelTopologyRegion: "r", corev1.LabelTopologyZone: d.zones[g],
			}}}
			if _, err := client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
				_ = client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(context.Background(), name, metav1.DeleteOptions{})
			})
		}
	}
	// Started once its Nodes exist, a kwok creates their Leases together, so they are
	// renewed in step and stop in step when it is frozen: the zone falls silent as one.
	for _, g := range []string{"a", "b"} {
		d.kwoks[g] = startKwok(t, "kwok-"+prefix+"-"+g, drillGroupLabel+"="+prefix+"-"+g, drillLease)
	}
	return d
}

func (d *zoneDrill) all() []string {
	return append(append([]string{}, d.nodes["a"]...), d.nodes["b"]...)
}

// metricZone is the zone label of the metrics for the zone of group g (region, NUL, zone).
func (d *zoneDrill) metricZone(g string) string { return `zone="r:` + "\x00:" + d.zones[g] + `"` }

// fullDisruptionEvent is the start of zone a's ZoneDisrupted Event as it enters full
// disruption with both its Nodes down.
func (d *zoneDrill) fullDisruptionEvent() string {
	return "ZoneDisrupted: Zone r:" + d.zones["a"] + " is in FullDisruption (2 of 2 Nodes not Ready): "
}

// start waits for kwok to have every Node Ready, then starts the controller with flags and
// waits until it has counted both zones whole and healthy; then freezes zone a's kwok,
// returning when. Started earlier, the controller could see one zone's Nodes not Ready yet
// while the other's are: a FullDisruption of zone a before the drill, and its Event taken
// for the one the drill waits for.
func (d *zoneDrill) start(t *testing.T, flags ...string) (*testenv.Controller, time.Time) {
	t.Helper()
	client := env.Client(t)
	// Ready only: the not-ready NoSchedule taint admission put on them is the controller's
	// to remove.
	waitNodes(t, client, slack, "the kwok nodes Ready", isReady, d.all()...)
	ctl := env.StartLeading(t, controller, "ctl", append(append([]string{}, drillTimings...), flags...)...)
	waitFor(t, slack, "both zones counted whole and healthy", func() bool {
		for _, g := range []string{"a", "b"} {
			if ctl.Metric("node_collector_zone_size{"+d.metricZone(g)+"}") != 2 || ctl.Metric("node_collector_zone_health{"+d.metricZone(g)+"}") != 100 {
				return false
			}
		}
		return true
	})
	waitNodes(t, client, slack, "the kwok nodes Ready and clean", isReadyClean, d.all()...)
	if evs := events(t, client, "default", corev1.NamespaceNodeLease); countPrefix(evs, "ZoneDisrupted: Zone r:"+d.zones["a"]+" ") != 0 {
		t.Fatalf("zone a disrupted before the drill: %q", evs)
	}
	if err := d.kwoks["a"].Freeze(); err != nil {
		t.Fatal(err)
	}
	return ctl, time.Now()
}

// checkZoneB fails unless zone b's Nodes are still Ready and clean.
func (d *zoneDrill) checkZoneB(t *testing.T) {
	t.Helper()
	for _, name := range d.nodes["b"] {
		if n := getNode(t, env.Client(t), name); !isReadyClean(n) {
			t.Errorf("healthy zone's node %s: ready %+v, taints %+v", name, readyOf(n), n.Spec.Taints)
		}
	}
}

// A zone whose Nodes all stop renewing their Leases while another zone is healthy. Upstream
// (the flag unset) taints its Nodes NoExecute at --node-eviction-rate; with
// --zone-full-disruption-eviction-rate=0 the zone is seen in full disruption, its Nodes are
// marked Unknown and tainted NoSchedule as usual, and no NoExecute taint ever comes. Both
// cases run --node-eviction-rate=1, so that upstream's tainting of the second Node takes a
// second, not ten.
func TestZoneFullDisruptionEvictionRate(t *testing.T) {
	requireEnv(t)
	const evictionRate = "--node-eviction-rate=1"

	t.Run("unset taints the zone as upstream", func(t *testing.T) {
		client := env.Client(t)
		clearZoneEvents(t, client)
		d := newZoneDrill(t, "zfdup")
		ctl, stopped := d.start(t, evictionRate)
		waitNodes(t, client, drillGrace+slack, "zone a's nodes Unknown with the unreachable NoExecute taint", func(n *corev1.Node) bool {
			return isUnreachable(n) && hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)
		}, d.nodes["a"]...)
		t.Logf("zone a's nodes tainted NoExecute %s after its Leases stopped", time.Since(stopped).Round(time.Millisecond))
		evs := events(t, client, "default", corev1.NamespaceNodeLease)
		if countPrefix(evs, d.fullDisruptionEvent()+"other zones are healthy, so NoExecute tainting continues at 1 Nodes/s") != 1 {
			t.Errorf("zone events %q, want one ZoneDisrupted for zone a at the node eviction rate", evs)
		}
		if v := ctl.Metric("node_collector_evictions_total{" + d.metricZone("a") + "}"); v != 2 {
			t.Errorf("node_collector_evictions_total for zone a = %v, want 2", v)
		}
		d.checkZoneB(t)
	})

	t.Run("0 stops tainting the zone", func(t *testing.T) {
		client := env.Client(t)
		clearZoneEvents(t, client)
		d := newZoneDrill(t, "zfd0")
		ctl, stopped := d.start(t, evictionRate, "--zone-full-disruption-eviction-rate=0")
		// The final state is reached once the controller has seen zone a in full disruption
		// (its Event) and has handled both Nodes as silent (Unknown, NoSchedule).
		waitFor(t, drillGrace+slack, "zone a's FullDisruption event", func() bool {
			return countPrefix(events(t, client, "default", corev1.NamespaceNodeLease), d.fullDisruptionEvent()) >= 1
		})
		t.Logf("zone a in full disruption %s after its Leases stopped", time.Since(stopped).Round(time.Millisecond))
		waitNodes(t, client, slack, "zone a's nodes Unknown with the unreachable NoSchedule taint", isUnreachable, d.nodes["a"]...)
		// Well past the moment a NoExecute taint would have come: the taint follows a Node's
		// Unknown by one monitor period (the settle wait), and the rate of 1 leaves a second
		// between the zone's two Nodes.
		time.Sleep(4 * time.Second)
		for _, name := range d.nodes["a"] {
			if n := getNode(t, client, name); hasNoExecute(n) {
				t.Errorf("node %s of the fully disrupted zone got a NoExecute taint: %+v", name, n.Spec.Taints)
			}
		}
		// The rate is set before the Event is recorded.
		if v := ctl.Metric("kcm_split_nodelifecycle_zone_eviction_rate{" + d.metricZone("a") + "}"); v != 0 {
			t.Errorf("zone a's rate = %v, want 0", v)
		}
		if v := ctl.Metric("node_collector_evictions_total{" + d.metricZone("a") + "}"); v > 0 {
			t.Errorf("node_collector_evictions_total for zone a = %v, want none", v)
		}
		evs := events(t, client, "default", corev1.NamespaceNodeLease)
		if countPrefix(evs, d.fullDisruptionEvent()+"other zones are healthy; NoExecute tainting at 0 Nodes/s (--zone-full-disruption-eviction-rate)") != 1 {
			t.Errorf("zone events %q, want one ZoneDisrupted for zone a naming the flag", evs)
		}
		d.checkZoneB(t)
	})
}
