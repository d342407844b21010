package mirroring

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func customEndpoints(subsets ...v1.EndpointSubset) *v1.Endpoints {
	return &v1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ext", UID: "ep-uid", Labels: map[string]string{"team": "db"},
			Annotations: map[string]string{"note": "x", v1.EndpointsLastChangeTriggerTime: "2026-01-01T00:00:00Z"}},
		Subsets: subsets,
	}
}

func addrs(ips ...string) []v1.EndpointAddress {
	out := make([]v1.EndpointAddress, 0, len(ips))
	for _, ip := range ips {
		out = append(out, v1.EndpointAddress{IP: ip})
	}
	return out
}

var port80 = []v1.EndpointPort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}

// applied turns a plan into the slices the apiserver would then hold.
func applied(existing []*discovery.EndpointSlice, p writePlan) []*discovery.EndpointSlice {
	byName := map[string]*discovery.EndpointSlice{}
	for _, s := range existing {
		byName[s.Name] = s
	}
	for _, s := range p.remove {
		delete(byName, s.Name)
	}
	for _, s := range p.update {
		byName[s.Name] = s
	}
	for i, s := range p.create {
		s = s.DeepCopy()
		s.Name = fmt.Sprintf("%s%d", s.GenerateName, i)
		byName[s.Name] = s
	}
	var out []*discovery.EndpointSlice
	for _, s := range byName {
		out = append(out, s)
	}
	return out
}

func TestMirrorDesiredAndPlan(t *testing.T) {
	ep := customEndpoints(v1.EndpointSubset{
		Addresses:         addrs("10.0.0.1", "10.0.0.2", "0bad", "0:0::5", "010.000.000.003"),
		NotReadyAddresses: addrs("10.0.0.9"),
		Ports:             port80,
	})
	// Repacked, the ready addresses read 010.000.000.003, 0:0::5, 0bad, 10.0.0.1, 10.0.0.2.
	d := desiredOf(ep, 3)
	if d.invalid != 1 || d.skipped != 3 {
		t.Fatalf("invalid %d skipped %d, want 1 invalid and 3 skipped (the invalid one and two past the cap, the not-ready one included)", d.invalid, d.skipped)
	}
	p := planWrites(ep, nil, d, 3)
	if len(p.create) != 2 || len(p.update)+len(p.remove) != 0 {
		t.Fatalf("plan from nothing: %d creates %d updates %d deletes, want one create per family", len(p.create), len(p.update), len(p.remove))
	}
	n := 0
	for _, s := range p.create {
		n += len(s.Endpoints)
		if s.Labels[discovery.LabelManagedBy] != ManagedBy || s.Labels[discovery.LabelServiceName] != "ext" || s.Labels["team"] != "db" ||
			s.Annotations["note"] != "x" || s.Annotations[v1.EndpointsLastChangeTriggerTime] != "" || s.GenerateName != "ext-" {
			t.Fatalf("slice meta: labels %v annotations %v generateName %q", s.Labels, s.Annotations, s.GenerateName)
		}
		if ref := metav1.GetControllerOf(s); ref == nil || ref.Kind != "Endpoints" || ref.UID != "ep-uid" {
			t.Fatalf("owner %+v", ref)
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || !*e.Conditions.Ready || e.Addresses[0] == "010.000.000.003" {
				t.Fatalf("endpoint %+v: want ready, canonical address", e)
			}
		}
	}
	if n != 3 {
		t.Fatalf("%d endpoints mirrored, want the cap of 3", n)
	}

	// Over the result: nothing to write.
	now := applied(nil, p)
	if again := planWrites(ep, now, desiredOf(ep, 3), 3); len(again.create)+len(again.update)+len(again.remove) != 0 {
		t.Fatalf("plan over its own result writes: %d/%d/%d", len(again.create), len(again.update), len(again.remove))
	}

	// New ports: each family's slice is rewritten in place, none replaced.
	moved := customEndpoints(v1.EndpointSubset{Addresses: addrs("10.0.0.1", "fd00::1"), Ports: []v1.EndpointPort{{Name: "https", Port: 443, Protocol: v1.ProtocolTCP}}})
	p = planWrites(moved, now, desiredOf(moved, 3), 3)
	if len(p.create) != 0 || len(p.remove) != 0 || len(p.update) != 2 {
		t.Fatalf("port change: %d creates %d updates %d deletes, want 2 updates", len(p.create), len(p.update), len(p.remove))
	}

	// A duplicate of a right slice goes; the right one stays unwritten.
	var v4 *discovery.EndpointSlice
	for _, s := range now {
		if s.AddressType == discovery.AddressTypeIPv4 {
			v4 = s
		}
	}
	dup := v4.DeepCopy()
	dup.Name = "aaa-duplicate"
	dup.Endpoints = dup.Endpoints[:1]
	p = planWrites(ep, append(now, dup), desiredOf(ep, 3), 3)
	if len(p.create)+len(p.update) != 0 || len(p.remove) != 1 || p.remove[0].Name != "aaa-duplicate" {
		t.Fatalf("duplicate: %d creates %d updates, deletes %v; want only the duplicate deleted", len(p.create), len(p.update), p.remove)
	}

	// Everything gone from the Endpoints: every slice goes.
	p = planWrites(customEndpoints(), now, desiredOf(customEndpoints(), 3), 3)
	if len(p.remove) != 2 || len(p.create)+len(p.update) != 0 {
		t.Fatalf("empty Endpoints: %d deletes, want 2", len(p.remove))
	}
}

func TestShouldMirror(t *testing.T) {
	ep := customEndpoints()
	if !shouldMirror(ep) {
		t.Fatal("plain custom Endpoints not mirrored")
	}
	skip := ep.DeepCopy()
	skip.Labels[discovery.LabelSkipMirror] = "true"
	lock := ep.DeepCopy()
	lock.Annotations["control-plane.alpha.kubernetes.io/leader"] = "{}"
	if shouldMirror(skip) || shouldMirror(lock) {
		t.Fatal("skip-mirror or leader-election Endpoints would be mirrored")
	}
}
