package endpoints

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// richPod has everything a real workload Pod carries, most of which the controller ignores.
func richPod(name, ip string, ready bool) *v1.Pod {
	status := v1.ConditionTrue
	if !ready {
		status = v1.ConditionFalse
	}
	big := make([]v1.EnvVar, 50)
	for i := range big {
		big[i] = v1.EnvVar{Name: "VAR_" + string(rune('A'+i%26)), Value: "some configuration value that takes space"}
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", UID: types.UID("uid-" + name), ResourceVersion: "42",
			Labels:          map[string]string{"app": "web"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/last-applied-configuration": string(make([]byte, 4096))},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-1", UID: "rs"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}},
		},
		Spec: v1.PodSpec{
			NodeName: "node-1", Hostname: name, Subdomain: "web",
			InitContainers: []v1.Container{{Name: "proxy", Image: "envoy", RestartPolicy: new(v1.ContainerRestartPolicyAlways),
				Ports: []v1.ContainerPort{{Name: "admin", ContainerPort: 9901, Protocol: v1.ProtocolTCP}}}},
			Containers: []v1.Container{{
				Name: "app", Image: "registry.example/app:1", Env: big,
				Ports:          []v1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: v1.ProtocolTCP}},
				Resources:      v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}},
				ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
			}},
			Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
		},
		Status: v1.PodStatus{
			Phase: v1.PodRunning, PodIP: ip, PodIPs: []v1.PodIP{{IP: ip}}, HostIP: "192.0.2.1",
			Conditions: []v1.PodCondition{
				{Type: v1.PodScheduled, Status: v1.ConditionTrue},
				{Type: v1.PodReady, Status: status, LastTransitionTime: metav1.NewTime(time.Unix(1700000000, 0))},
			},
			ContainerStatuses: []v1.ContainerStatus{{Name: "app", Ready: ready, Image: "registry.example/app:1", ImageID: "sha256:abc"}},
		},
	}
}

// TestProjectedPodsGiveTheSameEndpoints is the contract of the cache projection: whatever the
// controller computes from a full Pod it computes identically from the projected one.
func TestProjectedPodsGiveTheSameEndpoints(t *testing.T) {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"},
		Spec: v1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []v1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: v1.ProtocolTCP},
			{Name: "admin", Port: 9901, TargetPort: intstr.FromString("admin"), Protocol: v1.ProtocolTCP},
		}},
	}
	full := []*v1.Pod{richPod("a", "10.0.0.1", true), richPod("b", "10.0.0.2", false)}
	deleting := richPod("c", "10.0.0.3", true)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Unix(1700000100, 0)}
	full = append(full, deleting)

	projected := make([]*v1.Pod, len(full))
	for i, p := range full {
		out, err := cacheTransform(p.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		projected[i] = out.(*v1.Pod)
	}
	for _, publish := range []bool{false, true} {
		s := svc.DeepCopy()
		s.Spec.PublishNotReadyAddresses = publish
		want, got := desiredSubsets(s, full), desiredSubsets(s, projected)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("publishNotReady=%v: subsets differ (-full +projected):\n%s", publish, diff)
		}
		if len(want) == 0 {
			t.Fatal("fixture produced no subsets; the comparison proves nothing")
		}
	}
	// Pod update filtering must also see the same changes.
	for i := range full {
		for j := range full {
			fc, fl := podChange(full[i], full[j])
			pc, pl := podChange(projected[i], projected[j])
			if fc != pc || fl != pl {
				t.Fatalf("podChange(%s,%s): full=(%v,%v) projected=(%v,%v)", full[i].Name, full[j].Name, fc, fl, pc, pl)
			}
		}
	}
	if projected[0].Annotations != nil || projected[0].Spec.Containers[0].Env != nil || projected[0].ManagedFields != nil {
		t.Fatal("projection kept fields the controller never reads")
	}
}

func TestTransformDropsManagedFieldsOfOtherObjects(t *testing.T) {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	out, err := cacheTransform(svc)
	if err != nil {
		t.Fatal(err)
	}
	if out.(*v1.Service).ManagedFields != nil {
		t.Fatal("managedFields kept")
	}
}
