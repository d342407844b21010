package benchkit

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Realistic objects for scale runs and cache-size measurements: what a Deployment's Pod, a
// kubelet's Node or an application's ConfigMap carry in a real cluster (labels, owner
// references, several containers with env and probes, annotations such as a checksum and a
// kubectl last-applied-configuration, managedFields as server-side apply leaves them), so that
// what a cache keeps of them is measured against their real size, not against empty shells.

// realisticManagedFields is what a Deployment's Pod carries after kube-controller-manager
// created it and a kubelet reported its status: two entries of a few hundred bytes each.
func realisticManagedFields() []metav1.ManagedFieldsEntry {
	spec := `{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{},"f:version":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"x\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:env":{},"f:image":{},"f:name":{},"f:ports":{},"f:resources":{}},"k:{\"name\":\"sidecar\"}":{".":{},"f:image":{},"f:name":{}}},"f:dnsPolicy":{},"f:restartPolicy":{},"f:schedulerName":{},"f:terminationGracePeriodSeconds":{}}}`
	status := `{"f:status":{"f:conditions":{"k:{\"type\":\"ContainersReady\"}":{".":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Initialized\"}":{".":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Ready\"}":{".":{},"f:status":{},"f:type":{}}},"f:containerStatuses":{},"f:hostIP":{},"f:phase":{},"f:podIP":{},"f:podIPs":{},"f:startTime":{}}}`
	return []metav1.ManagedFieldsEntry{
		{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(spec)},
		{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(status), Subresource: "status"},
	}
}

// WithManagedFields returns obj's metadata with realistic managedFields, as a list from the
// apiserver would carry them (creates drop what a client sends, so fixtures lack them).
func WithManagedFields(m *metav1.ObjectMeta) { m.ManagedFields = realisticManagedFields() }

// PodReadyConditions are a Running Pod's conditions, Ready as given.
func PodReadyConditions(ready bool) []corev1.PodCondition {
	s := corev1.ConditionFalse
	if ready {
		s = corev1.ConditionTrue
	}
	now := metav1.Now()
	return []corev1.PodCondition{
		{Type: "PodReadyToStartContainers", Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: s, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: s, LastTransitionTime: now},
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
}

// RealisticPod is a Deployment's Pod (app label app, a ReplicaSet owner) bound to node with
// podIP, Running and Ready: two containers and an init container, env, probes, resources,
// a projected token volume, annotations. About 5 KiB as JSON.
func RealisticPod(ns, name, app, node, podIP string) *corev1.Pod {
	hash := "7d9f8b6c5d"
	env := make([]corev1.EnvVar, 0, 12)
	for i := range 10 {
		env = append(env, corev1.EnvVar{Name: fmt.Sprintf("APP_SETTING_%02d", i), Value: fmt.Sprintf("value-%d-%s", i, strings.Repeat("x", 16))})
	}
	env = append(env,
		corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		corev1.EnvVar{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}})
	res := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}, PeriodSeconds: 10}
	mounts := []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}
	falseV := false
	trueV := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, GenerateName: app + "-" + hash + "-",
			Labels: map[string]string{"app": app, "pod-template-hash": hash, "version": "v1.4.2", "app.kubernetes.io/part-of": "shop", "team": "payments"},
			Annotations: map[string]string{
				"checksum/config":                   "3f1d2c9a8b7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a",
				"prometheus.io/scrape":              "true",
				"prometheus.io/port":                "9090",
				"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-" + hash, UID: types.UID("0b7e3f4c-1d2a-4b5c-9e8f-" + fmt.Sprintf("%012d", len(app))), Controller: &trueV, BlockOwnerDeletion: &trueV}},
		},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: "default",
			InitContainers: []corev1.Container{{
				Name: "init-config", Image: "registry.example.com/tools/init:1.2.3", Command: []string{"sh", "-c", "cp /defaults/* /etc/app/"},
				VolumeMounts: mounts[:1], Resources: res,
			}},
			Containers: []corev1.Container{
				{
					Name: "app", Image: "registry.example.com/shop/" + app + ":1.4.2",
					Args:  []string{"--config=/etc/app/config.yaml", "--log-level=info"},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}},
					Env:   env, Resources: res, VolumeMounts: mounts, LivenessProbe: probe, ReadinessProbe: probe,
					SecurityContext:        &corev1.SecurityContext{AllowPrivilegeEscalation: &falseV, ReadOnlyRootFilesystem: &trueV},
					TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent,
				},
				{
					Name: "sidecar", Image: "registry.example.com/mesh/proxy:1.22.0",
					Ports: []corev1.ContainerPort{{Name: "proxy", ContainerPort: 15001, Protocol: corev1.ProtocolTCP}},
					Env:   env[:4], Resources: res, VolumeMounts: mounts[1:],
					TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent,
				},
			},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: app + "-config"}}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				}}}},
			},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			},
			RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst, SchedulerName: "default-scheduler",
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}}, HostIP: "10.0.0.1", HostIPs: []corev1.HostIP{{IP: "10.0.0.1"}},
			QOSClass: corev1.PodQOSBurstable, Conditions: PodReadyConditions(true),
		},
	}
	start := metav1.Now()
	p.Status.StartTime = &start
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image + "@sha256:" + strings.Repeat("ab", 32), Ready: true, Started: &trueV,
			ContainerID: "containerd://" + strings.Repeat("cd", 32), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}},
		})
	}
	return p
}

// RealisticNode is a kubelet's Node: topology and instance labels, capacity, addresses, node
// info and a list of 20 images (often most of a real Node's bytes).
func RealisticNode(name, zone string) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
				corev1.LabelTopologyZone: zone, corev1.LabelTopologyRegion: "region-1", corev1.LabelInstanceTypeStable: "m5.2xlarge",
				"node.kubernetes.io/pool": "general",
			},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		},
		Spec: corev1.NodeSpec{ProviderID: "kwok://" + name},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("7910m"), corev1.ResourceMemory: resource.MustParse("31Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Addresses:   []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.36.3", OSImage: "Ubuntu 24.04 LTS", KernelVersion: "6.8.0",
				ContainerRuntimeVersion: "containerd://2.0.0", OperatingSystem: "linux", Architecture: "amd64", MachineID: strings.Repeat("a", 32), SystemUUID: strings.Repeat("b", 32), BootID: strings.Repeat("c", 32)},
		},
	}
	for i := range 20 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("registry.example.com/team/image-%02d@sha256:%s", i, strings.Repeat("ef", 32)), fmt.Sprintf("registry.example.com/team/image-%02d:1.%d.0", i, i)},
			SizeBytes: int64(50_000_000 + i*1_000_000),
		})
	}
	now := metav1.Now()
	for _, t := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now, Reason: "KubeletHasSufficient", Message: "kubelet has sufficient resources"})
	}
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: now, LastTransitionTime: now, Reason: "KubeletReady", Message: "kubelet is posting ready status"})
	return n
}

// RealisticService is an application's ClusterIP Service selecting app.
func RealisticService(ns, app string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app,
			Labels:      map[string]string{"app": app, "app.kubernetes.io/part-of": "shop"},
			Annotations: map[string]string{"prometheus.io/scrape": "true"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
				{Name: "metrics", Port: 9090, TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// RealisticConfigMap is an application's ConfigMap: a config file of about 1 KiB.
func RealisticConfigMap(ns, name string) *corev1.ConfigMap {
	var b strings.Builder
	for i := range 24 {
		fmt.Fprintf(&b, "setting_%02d: %s\n", i, strings.Repeat("v", 30))
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name, "app.kubernetes.io/managed-by": "Helm"},
			Annotations: map[string]string{"meta.helm.sh/release-name": "shop", "meta.helm.sh/release-namespace": ns}},
		Data: map[string]string{"config.yaml": b.String()},
	}
}
