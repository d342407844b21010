package projection

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/endpointslice"
)

func TestProjectionSharesLabelsOnlyWhenEqual(t *testing.T) {
	pr := New() // one projection: what it interns is shared within it
	pod := func(labels map[string]string) *v1.Pod {
		return pr.projectPod(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Labels: labels}})
	}
	a := pod(map[string]string{"app": "web", "pod-template-hash": "abc"})
	b := pod(map[string]string{"pod-template-hash": "abc", "app": "web"})
	c := pod(map[string]string{"app": "web", "pod-template-hash": "abd"})
	// A key and value run together must not be confused with another split.
	d := pod(map[string]string{"app": "webpod-template-hash", "abc": ""})
	if fmt.Sprintf("%p", a.Labels) != fmt.Sprintf("%p", b.Labels) {
		t.Fatal("equal labels are not shared")
	}
	for _, other := range []*v1.Pod{c, d} {
		if fmt.Sprintf("%p", a.Labels) == fmt.Sprintf("%p", other.Labels) {
			t.Fatalf("labels %v shared with %v", other.Labels, a.Labels)
		}
	}
	if diff := cmp.Diff(map[string]string{"app": "web", "pod-template-hash": "abd"}, c.Labels); diff != "" {
		t.Fatal(diff)
	}
	if p := pod(nil); p.Labels != nil {
		t.Fatal("nil labels became a map")
	}
}

// Named-port lookup finds the same port on the projected Pod as on the full one, whatever
// the layout: a name repeated across containers (the first wins), protocols, sidecars, init
// containers that are not sidecars, containers without ports.
func TestProjectedPortsFindTheSamePort(t *testing.T) {
	pr := New() // one projection: what it interns is shared within it
	always, never := v1.ContainerRestartPolicyAlways, v1.ContainerRestartPolicy("Never")
	full := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{
			{Name: "setup", Ports: []v1.ContainerPort{{Name: "init", ContainerPort: 1, Protocol: v1.ProtocolTCP}}},
			{Name: "once", RestartPolicy: &never, Ports: []v1.ContainerPort{{Name: "once", ContainerPort: 2, Protocol: v1.ProtocolTCP}}},
			{Name: "mesh", RestartPolicy: &always, Ports: []v1.ContainerPort{
				{Name: "http", ContainerPort: 3, Protocol: v1.ProtocolTCP}, {Name: "admin", ContainerPort: 4, Protocol: v1.ProtocolTCP}}},
		},
		Containers: []v1.Container{
			{Name: "nothing"},
			{Name: "app", Ports: []v1.ContainerPort{
				{Name: "dns", ContainerPort: 53, Protocol: v1.ProtocolUDP}, {Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP, HostPort: 80}}},
			{Name: "second", Ports: []v1.ContainerPort{
				{Name: "http", ContainerPort: 9090, Protocol: v1.ProtocolTCP}, {Name: "dns", ContainerPort: 5353, Protocol: v1.ProtocolTCP}, {ContainerPort: 7}}},
		},
	}}
	projected := pr.projectPod(full)
	for _, name := range []string{"http", "dns", "admin", "init", "once", "missing", ""} {
		for _, proto := range []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP} {
			sp := &v1.ServicePort{Protocol: proto, TargetPort: intstr.FromString(name)}
			want, wantErr := endpointslice.FindPort(full, sp)
			got, gotErr := endpointslice.FindPort(projected, sp)
			if want != got || (wantErr == nil) != (gotErr == nil) {
				t.Errorf("port %q/%s: full %d (%v), projected %d (%v)", name, proto, want, wantErr, got, gotErr)
			}
		}
	}
	again := pr.projectPod(full.DeepCopy())
	if &again.Spec.Containers[0] != &projected.Spec.Containers[0] || &again.Spec.InitContainers[0] != &projected.Spec.InitContainers[0] {
		t.Fatal("equal ports are not shared")
	}
	if p := pr.projectPod(&v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}); p.Spec.Containers != nil || p.Spec.InitContainers != nil {
		t.Fatal("a Pod without ports keeps containers")
	}
}
