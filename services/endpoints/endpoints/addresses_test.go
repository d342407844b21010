package endpoints

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/endpointslice"
	endpointsliceutil "k8s.io/endpointslice/util"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/projection"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
)

// TestPodInEndpoints pins the library's inclusion rules as this controller relies on them.
func TestPodInEndpoints(t *testing.T) {
	deleting := func(p *v1.Pod) { p.DeletionTimestamp = &testobj.Created }
	for _, tc := range []struct {
		name            string
		pod             *v1.Pod
		publishNotReady bool
		want            bool
	}{
		{name: "running ready", pod: testobj.Pod("a", "10.1.0.1", true), want: true},
		{name: "running not ready", pod: testobj.Pod("a", "10.1.0.1", false), want: true},
		{name: "pending with IP", pod: testobj.Pod("a", "10.1.0.1", false, func(p *v1.Pod) { p.Status.Phase = v1.PodPending }), want: true},
		{name: "no IP", pod: testobj.Pod("a", "", true), want: false},
		{name: "no IP even if publishing not ready", pod: testobj.Pod("a", "", true), publishNotReady: true, want: false},
		{name: "only legacy podIP", pod: testobj.Pod("a", "", true, func(p *v1.Pod) { p.Status.PodIP = "10.1.0.1" }), want: true},
		{name: "succeeded", pod: testobj.Pod("a", "10.1.0.1", false, func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded }), want: false},
		{name: "failed", pod: testobj.Pod("a", "10.1.0.1", false, func(p *v1.Pod) { p.Status.Phase = v1.PodFailed }), want: false},
		{name: "failed even if publishing not ready", pod: testobj.Pod("a", "10.1.0.1", true, func(p *v1.Pod) { p.Status.Phase = v1.PodFailed }), publishNotReady: true, want: false},
		{name: "terminating", pod: testobj.Pod("a", "10.1.0.1", true, deleting), want: false},
		{name: "terminating kept when publishing not ready", pod: testobj.Pod("a", "10.1.0.1", true, deleting), publishNotReady: true, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := endpointsliceutil.ShouldPodBeInEndpoints(tc.pod, tc.publishNotReady); got != tc.want {
				t.Errorf("ShouldPodBeInEndpoints = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodReady(t *testing.T) {
	if !endpointsliceutil.IsPodReady(testobj.Pod("a", "10.1.0.1", true)) {
		t.Error("Ready=True pod not ready")
	}
	if endpointsliceutil.IsPodReady(testobj.Pod("a", "10.1.0.1", false)) {
		t.Error("Ready=False pod ready")
	}
	if endpointsliceutil.IsPodReady(testobj.Pod("a", "10.1.0.1", true, func(p *v1.Pod) { p.Status.Conditions = nil })) {
		t.Error("pod without conditions ready")
	}
}

func TestPodIPForService(t *testing.T) {
	dual := func(p *v1.Pod) {
		p.Status.PodIP = "10.1.0.1"
		p.Status.PodIPs = []v1.PodIP{{IP: "10.1.0.1"}, {IP: "fd00::1"}}
	}
	v6only := func(p *v1.Pod) {
		p.Status.PodIP = "fd00::1"
		p.Status.PodIPs = []v1.PodIP{{IP: "fd00::1"}}
	}
	families := func(f ...v1.IPFamily) func(*v1.Service) {
		return func(s *v1.Service) { s.Spec.IPFamilies = f }
	}
	for _, tc := range []struct {
		name   string
		svc    *v1.Service
		pod    *v1.Pod
		want   string
		wantOK bool
	}{
		{name: "v4 service, v4 pod", svc: testobj.Service("s"), pod: testobj.Pod("a", "10.1.0.1", true), want: "10.1.0.1", wantOK: true},
		{name: "v4 service, dual-stack pod", svc: testobj.Service("s"), pod: testobj.Pod("a", "", true, dual), want: "10.1.0.1", wantOK: true},
		{name: "v6 service, dual-stack pod", svc: testobj.Service("s", families(v1.IPv6Protocol)), pod: testobj.Pod("a", "", true, dual), want: "fd00::1", wantOK: true},
		{name: "dual-stack service uses its primary family", svc: testobj.Service("s", families(v1.IPv6Protocol, v1.IPv4Protocol)), pod: testobj.Pod("a", "", true, dual), want: "fd00::1", wantOK: true},
		{name: "v4 service, v6-only pod", svc: testobj.Service("s"), pod: testobj.Pod("a", "", true, v6only), wantOK: false},
		{name: "v6 service, v4-only pod", svc: testobj.Service("s", families(v1.IPv6Protocol)), pod: testobj.Pod("a", "10.1.0.1", true), wantOK: false},
		{name: "irregular IP is canonicalised", svc: testobj.Service("s"), pod: testobj.Pod("a", "010.001.000.001", true), want: "10.1.0.1", wantOK: true},
		{name: "no families: v6 cluster IP decides", svc: testobj.Service("s", families(), func(s *v1.Service) { s.Spec.ClusterIP = "fd00:10::1" }), pod: testobj.Pod("a", "", true, dual), want: "fd00::1", wantOK: true},
		{name: "no families: v4 cluster IP decides", svc: testobj.Service("s", families()), pod: testobj.Pod("a", "", true, dual), want: "10.1.0.1", wantOK: true},
		{name: "no families, headless: pod IP decides", svc: testobj.Service("s", families(), func(s *v1.Service) { s.Spec.ClusterIP = v1.ClusterIPNone }), pod: testobj.Pod("a", "", true, v6only), want: "fd00::1", wantOK: true},
		{name: "only legacy podIP gives no address", svc: testobj.Service("s"), pod: testobj.Pod("a", "", true, func(p *v1.Pod) { p.Status.PodIP = "10.1.0.1" }), wantOK: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := podIPForService(tc.svc, tc.pod)
			if ok != tc.wantOK || got != tc.want {
				t.Errorf("podIPForService = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestPodAddress(t *testing.T) {
	withHost := func(host, sub string) func(*v1.Pod) {
		return func(p *v1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = host, sub }
	}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want v1.EndpointAddress
	}{
		{name: "plain", pod: testobj.Pod("a", "10.1.0.1", true), want: testobj.Address("a", "10.1.0.1")},
		{
			name: "unscheduled pod has no nodeName rather than an empty one",
			pod:  testobj.Pod("a", "10.1.0.1", true, func(p *v1.Pod) { p.Spec.NodeName = "" }),
			want: func() v1.EndpointAddress { a := testobj.Address("a", "10.1.0.1"); a.NodeName = nil; return a }(),
		},
		{
			name: "hostname when subdomain is the service",
			pod:  testobj.Pod("a", "10.1.0.1", true, withHost("web-0", "s")),
			want: func() v1.EndpointAddress { a := testobj.Address("a", "10.1.0.1"); a.Hostname = "web-0"; return a }(),
		},
		{name: "no hostname for another subdomain", pod: testobj.Pod("a", "10.1.0.1", true, withHost("web-0", "other")), want: testobj.Address("a", "10.1.0.1")},
		{name: "no hostname without subdomain", pod: testobj.Pod("a", "10.1.0.1", true, withHost("web-0", "")), want: testobj.Address("a", "10.1.0.1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := podAddress(testobj.Service("s"), tc.pod)
			if !ok {
				t.Fatal("no address")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("address (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("hostname needs the same namespace", func(t *testing.T) {
		pod := testobj.Pod("a", "10.1.0.1", true, withHost("web-0", "s"), func(p *v1.Pod) { p.Namespace = "elsewhere" })
		got, _ := podAddress(testobj.Service("s"), pod)
		if got.Hostname != "" {
			t.Errorf("hostname = %q, want none", got.Hostname)
		}
	})
}

// TestTargetPort pins the library's target-port resolution as this controller relies on it.
func TestTargetPort(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	named := func(name string, proto v1.Protocol) *v1.ServicePort {
		return &v1.ServicePort{Port: 80, Protocol: proto, TargetPort: intstr.FromString(name)}
	}
	sidecar := func(policy *v1.ContainerRestartPolicy) func(*v1.Pod) {
		return func(p *v1.Pod) {
			p.Spec.InitContainers = []v1.Container{{
				Name: "proxy", RestartPolicy: policy,
				Ports: []v1.ContainerPort{{Name: "proxy", ContainerPort: 15001, Protocol: v1.ProtocolTCP}},
			}}
		}
	}
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		sp     *v1.ServicePort
		want   int32
		wantOK bool
	}{
		{name: "number", pod: testobj.Pod("a", "10.1.0.1", true), sp: &v1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(9000)}, want: 9000, wantOK: true},
		{name: "name", pod: testobj.Pod("a", "10.1.0.1", true), sp: named("http", v1.ProtocolTCP), want: 8080, wantOK: true},
		{name: "name with another protocol", pod: testobj.Pod("a", "10.1.0.1", true), sp: named("http", v1.ProtocolUDP), wantOK: false},
		{name: "unknown name", pod: testobj.Pod("a", "10.1.0.1", true), sp: named("metrics", v1.ProtocolTCP), wantOK: false},
		{name: "name on a sidecar", pod: testobj.Pod("a", "10.1.0.1", true, sidecar(&always)), sp: named("proxy", v1.ProtocolTCP), want: 15001, wantOK: true},
		{name: "name on a plain init container", pod: testobj.Pod("a", "10.1.0.1", true, sidecar(nil)), sp: named("proxy", v1.ProtocolTCP), wantOK: false},
		{
			name: "second container",
			pod: testobj.Pod("a", "10.1.0.1", true, func(p *v1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "m", Ports: []v1.ContainerPort{{Name: "metrics", ContainerPort: 9090, Protocol: v1.ProtocolTCP}}})
			}),
			sp: named("metrics", v1.ProtocolTCP), want: 9090, wantOK: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := endpointslice.FindPort(tc.pod, tc.sp)
			if got, ok := int32(n), err == nil; ok != tc.wantOK || got != tc.want {
				t.Errorf("FindPort = %d, %v; want %d, ok=%v", n, err, tc.want, tc.wantOK)
			}
		})
	}
}

// Over 80 lines: one table of cases, each a few lines; splitting it would scatter the cases.
func TestDesiredSubsets(t *testing.T) {
	headlessNoPorts := func(s *v1.Service) { s.Spec.ClusterIP = v1.ClusterIPNone; s.Spec.Ports = nil }
	publish := func(s *v1.Service) { s.Spec.PublishNotReadyAddresses = true }
	twoPorts := func(s *v1.Service) {
		s.Spec.Ports = []v1.ServicePort{
			{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromString("http")},
			{Name: "admin", Port: 81, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(9000), AppProtocol: new("http")},
		}
	}
	noHTTPPort := func(p *v1.Pod) { p.Spec.Containers[0].Ports = nil }
	for _, tc := range []struct {
		name string
		svc  *v1.Service
		pods []*v1.Pod
		want []v1.EndpointSubset
	}{
		{name: "no pods", svc: testobj.Service("s"), want: nil},
		{
			name: "ready and not ready",
			svc:  testobj.Service("s"),
			pods: []*v1.Pod{testobj.Pod("b", "10.1.0.2", false), testobj.Pod("a", "10.1.0.1", true), testobj.Pod("c", "10.1.0.3", true)},
			want: []v1.EndpointSubset{{
				Addresses:         []v1.EndpointAddress{testobj.Address("a", "10.1.0.1"), testobj.Address("c", "10.1.0.3")},
				NotReadyAddresses: []v1.EndpointAddress{testobj.Address("b", "10.1.0.2")},
				Ports:             []v1.EndpointPort{testobj.Port("http", 8080)},
			}},
		},
		{
			name: "publishNotReadyAddresses lists everything as ready, terminating included",
			svc:  testobj.Service("s", publish),
			pods: []*v1.Pod{testobj.Pod("a", "10.1.0.1", false), testobj.Pod("b", "10.1.0.2", true, func(p *v1.Pod) { p.DeletionTimestamp = &testobj.Created })},
			want: []v1.EndpointSubset{{
				Addresses: []v1.EndpointAddress{testobj.Address("a", "10.1.0.1"), testobj.Address("b", "10.1.0.2")},
				Ports:     []v1.EndpointPort{testobj.Port("http", 8080)},
			}},
		},
		{
			name: "excluded pods",
			svc:  testobj.Service("s"),
			pods: []*v1.Pod{
				testobj.Pod("a", "10.1.0.1", true),
				testobj.Pod("noip", "", true),
				testobj.Pod("done", "10.1.0.2", false, func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded }),
				testobj.Pod("going", "10.1.0.3", true, func(p *v1.Pod) { p.DeletionTimestamp = &testobj.Created }),
				testobj.Pod("v6", "fd00::1", true),
			},
			want: []v1.EndpointSubset{{Addresses: []v1.EndpointAddress{testobj.Address("a", "10.1.0.1")}, Ports: []v1.EndpointPort{testobj.Port("http", 8080)}}},
		},
		{
			name: "headless without ports gets address-only subsets",
			svc:  testobj.Service("s", headlessNoPorts),
			pods: []*v1.Pod{testobj.Pod("a", "10.1.0.1", true), testobj.Pod("b", "10.1.0.2", false)},
			want: []v1.EndpointSubset{{
				Addresses:         []v1.EndpointAddress{testobj.Address("a", "10.1.0.1")},
				NotReadyAddresses: []v1.EndpointAddress{testobj.Address("b", "10.1.0.2")},
			}},
		},
		{
			name: "non-headless without ports gets nothing",
			svc:  testobj.Service("s", func(s *v1.Service) { s.Spec.Ports = nil }),
			pods: []*v1.Pod{testobj.Pod("a", "10.1.0.1", true)},
			want: nil,
		},
		{
			name: "a pod lacking a named port is left out of that port only",
			svc:  testobj.Service("s", twoPorts),
			pods: []*v1.Pod{testobj.Pod("a", "10.1.0.1", true), testobj.Pod("b", "10.1.0.2", true, noHTTPPort)},
			want: []v1.EndpointSubset{
				{
					Addresses: []v1.EndpointAddress{testobj.Address("a", "10.1.0.1")},
					Ports:     []v1.EndpointPort{testobj.Port("http", 8080)},
				},
				{
					Addresses: []v1.EndpointAddress{testobj.Address("a", "10.1.0.1"), testobj.Address("b", "10.1.0.2")},
					Ports:     []v1.EndpointPort{{Name: "admin", Port: 9000, Protocol: v1.ProtocolTCP, AppProtocol: new("http")}},
				},
			},
		},
		{
			name: "pods resolving a named port differently get subsets of their own",
			svc:  testobj.Service("s", func(s *v1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromString("http") }),
			pods: []*v1.Pod{
				testobj.Pod("a", "10.1.0.1", true),
				testobj.Pod("b", "10.1.0.2", true, func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 8081 }),
			},
			want: []v1.EndpointSubset{
				{Addresses: []v1.EndpointAddress{testobj.Address("a", "10.1.0.1")}, Ports: []v1.EndpointPort{testobj.Port("http", 8080)}},
				{Addresses: []v1.EndpointAddress{testobj.Address("b", "10.1.0.2")}, Ports: []v1.EndpointPort{testobj.Port("http", 8081)}},
			},
		},
		{
			name: "same port number on two protocols",
			svc: testobj.Service("s", func(s *v1.Service) {
				s.Spec.Ports = []v1.ServicePort{
					{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
					{Name: "dns-tcp", Port: 53, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
				}
			}),
			pods: []*v1.Pod{testobj.Pod("a", "10.1.0.1", true)},
			want: []v1.EndpointSubset{{
				Addresses: []v1.EndpointAddress{testobj.Address("a", "10.1.0.1")},
				Ports:     []v1.EndpointPort{{Name: "dns-tcp", Port: 53, Protocol: v1.ProtocolTCP}, {Name: "dns", Port: 53, Protocol: v1.ProtocolUDP}},
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := desiredSubsets(tc.svc, tc.pods)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("subsets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDesiredSubsetsSharesNoMemoryWithService(t *testing.T) {
	svc := testobj.Service("s", func(s *v1.Service) { s.Spec.Ports[0].AppProtocol = new("h2c") })
	got := desiredSubsets(svc, []*v1.Pod{testobj.Pod("a", "10.1.0.1", true)})
	*got[0].Ports[0].AppProtocol = "changed"
	if *svc.Spec.Ports[0].AppProtocol != "h2c" {
		t.Fatal("desired subsets alias the Service's appProtocol")
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
	full := testobj.RichPods()
	projected := testobj.Projected(t, full, projection.New().Transform)
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
	if projected[0].Annotations != nil || projected[0].Spec.Containers[0].Env != nil || projected[0].ManagedFields != nil ||
		len(projected[0].Status.Conditions) != 1 || projected[0].Status.Conditions[0].Type != v1.PodReady {
		t.Fatal("projection kept fields the controller never reads")
	}
}
