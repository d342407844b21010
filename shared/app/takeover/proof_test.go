package takeover

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kcmPod is a kube-controller-manager static Pod as its mirror Pod shows it: on node, with
// args, its container running since started (zero: not running).
func kcmPod(node string, started time.Time, args ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-controller-manager-" + node, Labels: map[string]string{"component": "kube-controller-manager"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "kube-controller-manager", Command: append([]string{"kube-controller-manager", "--leader-elect=true"}, args...)}}},
	}
	if !started.IsZero() {
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "kube-controller-manager",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started.Truncate(time.Second))}}}}
	}
	return p
}

// kcmLeaseHeld is kube-controller-manager's Lease, held by holder (empty: released), last
// renewed at renewed.
func kcmLeaseHeld(holder string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-controller-manager", ResourceVersion: "7"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: new(int32(15)),
			AcquireTime: &metav1.MicroTime{Time: renewed.Add(-time.Hour)}, RenewTime: &metav1.MicroTime{Time: renewed}}}
}

// acquiredAt sets the Lease's acquire time.
func acquiredAt(l *coordinationv1.Lease, at time.Time) *coordinationv1.Lease {
	l.Spec.AcquireTime = &metav1.MicroTime{Time: at}
	return l
}

func TestProveKCMOff(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	start := now.Add(-time.Minute)
	off := "--controllers=*,-endpoints-controller,-endpointslice-controller"
	ours := []string{"endpoints-controller", "endpointslice-controller"}
	released := kcmLeaseHeld("", start)
	for _, tc := range []struct {
		name  string
		v     kcmView
		proof verdict
		why   string // a part of the reason
	}{
		{name: "not synced", v: kcmView{}, why: "not read yet"},
		{name: "no Pod, no Lease: no kube-controller-manager", v: kcmView{synced: true}, proof: proven},
		{name: "no --controllers: every controller runs", v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start)}}, why: "runs endpoints-controller"},
		{name: "both turned off", v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off)}}, proof: proven},
		{name: "one left on", v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, "--controllers=*,-endpoints-controller")}}, why: "runs endpointslice-controller"},
		{name: "aliases", v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, "--controllers=*,-endpoint,-endpointslice")}}, proof: proven},
		{name: "value as the next argument", v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, "--controllers", "*,-endpoints-controller,-endpointslice-controller")}}, proof: proven},
		{name: "repeated flags add up", v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, "--controllers=*", "--controllers=-endpoints-controller,-endpointslice-controller")}}, proof: proven},
		{name: "a list without star runs only what it names", v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, "--controllers=garbage-collector-controller")}}, proof: proven},
		{name: "first entry decides", v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, "--controllers=endpoint,-endpoints-controller,-endpointslice-controller")}}, why: "runs endpoints-controller"},
		{name: "one replica of three not rolled", v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off), kcmPod("cp-2", start), kcmPod("cp-3", start, off)}}, why: "kube-controller-manager-cp-2 runs"},
		{name: "expanded by the kubelet: unknown", v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, "--controllers=$(CONTROLLERS)")}}, why: "expanded by the kubelet"},
		{name: "no kube-controller-manager container", v: kcmView{synced: true, pods: []*corev1.Pod{func() *corev1.Pod {
			p := kcmPod("cp-1", start, off)
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar"})
			p.Spec.Containers[0].Name = "kcm"
			return p
		}()}}, why: "no container named"},
		{name: "Lease released", v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off)}, lease: released, leaseSince: now}, proof: proven},
		{name: "Lease held by a process started in a proven Pod", proof: proven,
			v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off)}, lease: kcmLeaseHeld("cp-1_4a1b", start.Add(5*time.Second)), leaseSince: now}},
		{name: "Lease last renewed before the Pod's process started: maybe by the one it replaced", why: "no Pod on node \"cp-1\" runs a process started before its last renewal",
			v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off)}, lease: kcmLeaseHeld("cp-1_4a1b", start.Add(-time.Hour)), leaseSince: now}},
		{name: "Lease renewed within the start's second: not surely after", proof: undecided, why: "within the second",
			v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off)}, lease: kcmLeaseHeld("cp-1_4a1b", start.Add(500*time.Millisecond)), leaseSince: now}},
		{name: "Lease held by a host that is no Pod's node: not proof, whenever it took it", why: "on host \"elsewhere\", which is no node of its Pods (if that host's Node has another name, map it: --kcm-lease-host-nodes=elsewhere=<node>)",
			v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off)}, lease: acquiredAt(kcmLeaseHeld("elsewhere_4a1b", now), start.Add(30*time.Second)), leaseSince: now}},
		{name: "Lease held by a host whose Pod does not run", why: "no Pod on node \"cp-1\"",
			v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", time.Time{}, off)}, lease: kcmLeaseHeld("cp-1_4a1b", now), leaseSince: now}},
		// kubeadm's nodeRegistration.name or a cloud's node names: the Node is not named after the
		// host in kube-controller-manager's identity; --kcm-lease-host-nodes says which it is.
		{name: "host mapped to its Node, renewed after that Pod's process started", proof: proven, why: "which runs in Pod kube-system/kube-controller-manager-cp-2",
			v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off), kcmPod("cp-2", start.Add(10*time.Second), off)},
				lease: kcmLeaseHeld("VM_4a1b", now), leaseSince: now, hostNodes: map[string]string{"vm": "cp-2"}}},
		{name: "host mapped to its Node, renewed before that Pod's process started", why: "no Pod on node \"cp-2\" runs a process started before its last renewal",
			v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off), kcmPod("cp-2", start.Add(10*time.Second), off)},
				lease: kcmLeaseHeld("vm_4a1b", start.Add(5*time.Second)), leaseSince: now, hostNodes: map[string]string{"vm": "cp-2"}}},
		{name: "another host mapped: not this one", why: "on host \"vm\", which is no node of its Pods",
			v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off)}, lease: kcmLeaseHeld("vm_4a1b", now), leaseSince: now, hostNodes: map[string]string{"other": "cp-1"}}},
		// No Pod in sight: a static Pod's mirror Pod deleted and created again (a manifest change).
		{name: "Lease released, no Pod in sight: it may be coming back", why: "released, and no Pod of kube-controller-manager is in sight",
			v: kcmView{synced: true, lease: released, leaseSince: now.Add(-time.Minute)}},
		{name: "Lease expired, no Pod in sight: it may be coming back", why: "expired, and no Pod of kube-controller-manager is in sight",
			v: kcmView{synced: true, lease: kcmLeaseHeld("cp-1_4a1b", start), leaseSince: now.Add(-time.Minute)}},
		{name: "Lease released and no Pod in sight for five minutes: gone", proof: proven, why: "released for 5m0s",
			v: kcmView{synced: true, lease: released, leaseSince: now.Add(-goneAfter - time.Second)}},
		{name: "Lease held, no Pod in sight", why: "which is no node of its Pods",
			v: kcmView{synced: true, lease: kcmLeaseHeld("cp-1_4a1b", now), leaseSince: now}},
		{name: "Lease held, no host in the identity", why: "names no host",
			v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off)}, lease: kcmLeaseHeld("kcm", now), leaseSince: now}},
		{name: "Lease held by an unknown host, expired by local observation", proof: proven,
			v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off)}, lease: kcmLeaseHeld("elsewhere_4a1b", start), leaseSince: now.Add(-16 * time.Second)}},
		{name: "Lease renewed long ago by its own clock, seen changing here: not expired", why: "on host \"elsewhere\", which is no node",
			v: kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off)}, lease: kcmLeaseHeld("elsewhere_4a1b", now.Add(-time.Hour)), leaseSince: now.Add(-14 * time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proof, why := proveKCMOff(ours, tc.v, now)
			if proof != tc.proof || !strings.Contains(why, tc.why) {
				t.Errorf("proveKCMOff = %v, %q; want %v and a reason with %q", proof, why, tc.proof, tc.why)
			}
		})
	}
}

func TestProveKCMOffEveryBinarysNames(t *testing.T) {
	now := time.Now()
	// kubeadm's manifest with every controller kcm-split replaces turned off, by alias where
	// kube-controller-manager has one.
	off := "--controllers=*,bootstrapsigner,tokencleaner,-endpoint,-endpointslice,-endpointslicemirroring,-nodelifecycle,-taint-eviction-controller,-nodeipam,-resourcequota,-namespace,-persistentvolume-binder,-service"
	v := kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", now.Add(-time.Minute), off)}}
	for name := range kcmAliases() {
		if p, why := proveKCMOff([]string{name}, v, now); p != proven {
			t.Errorf("%s: %s", name, why)
		}
	}
	on := kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", now.Add(-time.Minute), "--controllers=*,bootstrapsigner,tokencleaner")}}
	for name := range kcmAliases() {
		if p, _ := proveKCMOff([]string{name}, on, now); p != unproven {
			t.Errorf("%s: proven off under --controllers=*", name)
		}
	}
}

func TestKCMRunsAny(t *testing.T) {
	start := time.Now().Add(-time.Minute)
	ours := []string{"endpoints-controller", "endpointslice-controller"}
	off := "--controllers=*,-endpoint,-endpointslice-controller"
	unreadable := "--controllers=$(CONTROLLERS)"
	for _, tc := range []struct {
		name string
		v    kcmView
		want float64
	}{
		{"not read yet", kcmView{}, -1},
		{"no Pod", kcmView{synced: true}, 0},
		{"every Pod turns them off", kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off), kcmPod("cp-2", start, off)}}, 0},
		{"off, whoever holds the Lease", kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off)}, lease: kcmLeaseHeld("elsewhere_1", start)}, 0},
		{"no --controllers runs every one", kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, off), kcmPod("cp-2", start)}}, 1},
		{"one of them left on", kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, "--controllers=*,-endpoint")}}, 1},
		{"a Pod not running still says what it will run", kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", time.Time{})}}, 1},
		{"an unreadable Pod beside one that runs them", kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, unreadable), kcmPod("cp-2", start)}}, 1},
		{"an unreadable Pod beside one that does not", kcmView{synced: true, pods: []*corev1.Pod{kcmPod("cp-1", start, unreadable), kcmPod("cp-2", start, off)}}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := kcmRunsAny(ours, tc.v); got != tc.want {
				t.Errorf("kcmRunsAny = %v, want %v", got, tc.want)
			}
		})
	}
}
