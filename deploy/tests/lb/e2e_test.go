package lb

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcm-split/kcm-split/shared/testenv"
	"github.com/kcm-split/kcm-split/shared/testenv/dataplane"
	"github.com/kcm-split/kcm-split/shared/testenv/handover"
)

const (
	enableEnv = "KCM_SPLIT_LB_E2E"
	// MetalLB's namespace: its pools, its speaker, its controller.
	mlNS = "metallb-system"
	// The workload and its Services.
	appNS = "lb-e2e"
	// The chart's release (service-lb).
	release   = "kcm-split"
	releaseNS = "kube-system"

	// The client's side of the world: a network namespace and a veth in 198.18.100.0/24, inside
	// the benchmarking range 198.18.0.0/15 the network guard covers (192.0.2.0/24 can be the
	// machine's own uplink, as on the VMs here, the real node's Pods take 198.51.100.0/24, and
	// 203.0.113.0/24 holds the Go module proxy's and Debian's addresses there); the pool is the
	// top of the same subnet, so the client reaches it by ARP on the link and nothing else
	// routes it.
	netnsName = "kcm-lbe2e"
	hostLink  = "kcmlb0"
	peerLink  = "kcmlb1"
	hostAddr  = "198.18.100.1/24"
	peerAddr  = "198.18.100.2/24"
	poolRange = "198.18.100.200-198.18.100.250"
	linkNet   = "198.18.100.0/24"
	poolName  = "lb-e2e"

	// Services measured for created -> first answer.
	latencyServices = 20
	// The speaker's metrics port on the host network (MetalLB's default 7472 is left alone).
	speakerPort = 7572
)

var (
	poolGVR = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}
	l2GVR   = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "l2advertisements"}
)

// config is what e2e.sh passes in.
type config struct {
	node          string   // the real node
	workload      string   // agnhost (netexec answers /hostname with the Pod's name)
	controllers   []string // metallb, service-lb: each gets the same scenarios in turn
	speakerImage  string
	mlCtrlImage   string
	helm, chart   string // service-lb: bin/helm and charts/kcm-split
	registry, tag string // service-lb's image: <registry>/service-lb-controller:<tag>
	proxyMetrics  string // kube-proxy's metrics page on the node
}

type suite struct {
	t      *testing.T
	ctx    context.Context
	cfg    config
	cs     kubernetes.Interface
	dyn    dynamic.Interface
	client *NetnsClient
	pods   []string // the workload's Pod names: what a correct answer names
	podIPs []string // their addresses: where kube-proxy must send a Service's address
}

func TestLBE2E(t *testing.T) {
	if os.Getenv(enableEnv) != "1" {
		t.Skipf("needs a real node, root and network namespaces: run `make lb-e2e` (it sets %s=1)", enableEnv)
	}
	cfg := config{
		node:         testenv.MustEnv(t, "KCM_SPLIT_LB_E2E_NODE", "make lb-e2e"),
		workload:     testenv.MustEnv(t, "KCM_SPLIT_LB_E2E_WORKLOAD_IMAGE", "make lb-e2e"),
		controllers:  strings.Split(envOr("KCM_SPLIT_LB_E2E_CONTROLLERS", "metallb,service-lb"), ","),
		speakerImage: envOr("KCM_SPLIT_LB_E2E_SPEAKER_IMAGE", "quay.io/metallb/speaker:v0.15.2"),
		mlCtrlImage:  envOr("KCM_SPLIT_LB_E2E_METALLB_CONTROLLER_IMAGE", "quay.io/metallb/controller:v0.15.2"),
		helm:         os.Getenv("KCM_SPLIT_LB_E2E_HELM"),
		chart:        os.Getenv("KCM_SPLIT_LB_E2E_CHART"),
		registry:     os.Getenv("KCM_SPLIT_LB_E2E_IMAGE_REGISTRY"),
		tag:          os.Getenv("KCM_SPLIT_LB_E2E_IMAGE_TAG"),
		proxyMetrics: envOr("KCM_SPLIT_LB_E2E_PROXY_METRICS", "http://127.0.0.1:10249/metrics"),
	}
	rc, err := clientcmd.BuildConfigFromFlags("", testenv.MustEnv(t, "KUBECONFIG", "make lb-e2e"))
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 50, 100
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	t.Cleanup(cancel)
	s := &suite{t: t, ctx: ctx, cfg: cfg, cs: kubernetes.NewForConfigOrDie(rc), dyn: dynamic.NewForConfigOrDie(rc)}

	s.link()
	s.speaker()
	s.pool()
	s.workload()
	for _, c := range cfg.controllers {
		t.Run(c, func(t *testing.T) {
			sub := *s
			sub.t = t
			// Registered first, so it runs last: whatever a failed run left in the namespace
			// goes before the next controller starts.
			t.Cleanup(sub.deleteServices)
			switch c {
			case "metallb":
				sub.runMetalLBController()
			case "service-lb":
				sub.runServiceLB()
			default:
				t.Fatalf("unknown controller %q (metallb, service-lb)", c)
			}
		})
	}
}

// link creates the client's network namespace and the veth joining it to the node, and removes
// both at the end (also on failure: the namespace goes with its end of the veth, the node's
// end with it).
func (s *suite) link() {
	t := s.t
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// The subnet must be nobody's on this machine: no address in it, no route into it but the
	// default one and the network guard's (protocol 211, behind the link's own route).
	// Otherwise the node would send the test's packets elsewhere.
	for _, c := range [][]string{{"-4", "-o", "addr", "show", "to", linkNet}, {"-4", "route", "show", "match", linkNet}} {
		out, err := exec.Command("ip", c...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(c, " "), err, out)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" && !strings.HasPrefix(l, "default ") && !strings.Contains(l, " proto 211 ") {
				t.Fatalf("%s is in use on this machine (%s): the test needs it for its own link", linkNet, l)
			}
		}
	}
	t.Cleanup(func() {
		// Either may already be gone; what is left is reported by e2e.sh's leftovers check.
		_ = exec.Command("ip", "link", "del", hostLink).Run()
		_ = exec.Command("ip", "netns", "del", netnsName).Run()
	})
	ip("netns", "add", netnsName)
	ip("link", "add", hostLink, "type", "veth", "peer", "name", peerLink, "netns", netnsName)
	ip("addr", "add", hostAddr, "dev", hostLink)
	ip("link", "set", hostLink, "up")
	ip("-n", netnsName, "addr", "add", peerAddr, "dev", peerLink)
	ip("-n", netnsName, "link", "set", peerLink, "up")
	ip("-n", netnsName, "link", "set", "lo", "up")
	// ARP retries every 100 ms instead of every second in the client's own namespace, so that
	// the moment the speaker starts answering shows in the figures within 100 ms.
	if out, err := exec.Command("ip", "netns", "exec", netnsName, "sysctl", "-q", "-w",
		"net.ipv4.neigh."+peerLink+".retrans_time_ms=100").CombinedOutput(); err != nil {
		t.Fatalf("sysctl in %s: %v\n%s", netnsName, err, out)
	}
	c, err := NewNetnsClient("/run/netns/"+netnsName, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s.client = c
	t.Logf("client: netns %s, %s on %s <-> %s on %s (node side)", netnsName, peerAddr, peerLink, hostAddr, hostLink)
}

// speaker runs MetalLB's speaker as a DaemonSet on the real node, L2 only, memberlist off (one
// node: no bind address, so it never starts).
func (s *suite) speaker() {
	t := s.t
	labels := map[string]string{"app": "metallb", "component": "speaker"}
	env := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "speaker", Namespace: mlNS, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            "speaker",
					HostNetwork:                   true,
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": s.cfg.node},
					TerminationGracePeriodSeconds: ptr(int64(2)),
					Containers: []corev1.Container{{
						Name:            "speaker",
						Image:           s.cfg.speakerImage,
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{fmt.Sprintf("--port=%d", speakerPort), "--log-level=debug"},
						Env: []corev1.EnvVar{
							env("METALLB_NODE_NAME", "spec.nodeName"),
							env("METALLB_POD_NAME", "metadata.name"),
							env("METALLB_HOST", "status.hostIP"),
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr(false),
							ReadOnlyRootFilesystem:   ptr(true),
							Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}, Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
	if _, err := s.cs.AppsV1().DaemonSets(mlNS).Create(s.ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.deleteAndWait("daemonset speaker", s.podsGone(mlNS, "component=speaker"), deleteDS(s.cs, mlNS, "speaker"))
	})
	s.waitPodsReady(mlNS, "component=speaker", 1, 2*time.Minute)
}

// pool creates the IPAddressPool and its L2Advertisement, announced from the real node only and
// only on the client's link (the kwok nodes run no speaker, and with memberlist off MetalLB
// counts every node that matches as a candidate).
func (s *suite) pool() {
	t := s.t
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": poolName, "namespace": mlNS},
		"spec":     map[string]any{"addresses": []any{poolRange}},
	}}
	l2 := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement",
		"metadata": map[string]any{"name": poolName, "namespace": mlNS},
		"spec": map[string]any{
			"ipAddressPools": []any{poolName},
			"interfaces":     []any{hostLink},
			"nodeSelectors":  []any{map[string]any{"matchLabels": map[string]any{"kubernetes.io/hostname": s.cfg.node}}},
		},
	}}
	for _, o := range []struct {
		gvr schema.GroupVersionResource
		obj *unstructured.Unstructured
	}{{poolGVR, pool}, {l2GVR, l2}} {
		if _, err := s.dyn.Resource(o.gvr).Namespace(mlNS).Create(s.ctx, o.obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", o.gvr.Resource, err)
		}
		r := o.gvr
		t.Cleanup(func() {
			if err := s.dyn.Resource(r).Namespace(mlNS).Delete(context.Background(), poolName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s %s: %v", r.Resource, poolName, err)
			}
		})
	}
	t.Logf("pool %s: %s, L2 on %s of node %s", poolName, poolRange, hostLink, s.cfg.node)
}

// workload runs agnhost netexec behind the Services: GET /hostname answers the Pod's name.
func (s *suite) workload() {
	t := s.t
	if _, err := s.cs.CoreV1().Namespaces().Create(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		if err := s.cs.CoreV1().Namespaces().Delete(bg, appNS, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", appNS, err)
			return
		}
		err := wait.PollUntilContextTimeout(bg, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := s.cs.CoreV1().Namespaces().Get(ctx, appNS, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("namespace %s still there 2m after its deletion", appNS)
		}
	})
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: appNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": s.cfg.node},
					TerminationGracePeriodSeconds: ptr(int64(1)),
					Containers: []corev1.Container{{
						Name: "netexec", Image: s.cfg.workload, ImagePullPolicy: corev1.PullNever,
						Args:  []string{"netexec", "--http-port=8080", "--udp-port=-1"},
						Ports: []corev1.ContainerPort{{ContainerPort: 8080, Name: "http"}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/hostname", Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
	if _, err := s.cs.AppsV1().Deployments(appNS).Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.pods = s.waitPodsReady(appNS, "app=web", 2, 2*time.Minute)
	pl, err := s.cs.CoreV1().Pods(appNS).List(s.ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pl.Items {
		s.podIPs = append(s.podIPs, p.Status.PodIP)
	}
	t.Logf("workload: %s (agnhost netexec), Pods %v", s.cfg.workload, s.pods)
}

// runMetalLBController: MetalLB's own controller, as its manifests run it (one replica, no
// leader election), webhooks off (nothing here calls them, and a webhook with its controller
// down would refuse the pools).
func (s *suite) runMetalLBController() {
	t := s.t
	labels := map[string]string{"app": "metallb", "component": "controller"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "controller", Namespace: mlNS, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName:            "controller",
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": s.cfg.node},
					TerminationGracePeriodSeconds: ptr(int64(0)),
					SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(65534))},
					Containers: []corev1.Container{{
						Name: "controller", Image: s.cfg.mlCtrlImage, ImagePullPolicy: corev1.PullNever,
						Args: []string{"--port=7472", "--log-level=info", "--webhook-mode=disabled", "--disable-cert-rotation"},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr(false),
							ReadOnlyRootFilesystem:   ptr(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
	if _, err := s.cs.AppsV1().Deployments(mlNS).Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.deleteAndWait("deployment controller", s.podsGone(mlNS, "component=controller"), func(ctx context.Context) error {
			return s.cs.AppsV1().Deployments(mlNS).Delete(ctx, "controller", metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationForeground)})
		})
	})
	s.waitPodsReady(mlNS, "component=controller", 1, 2*time.Minute)
	s.scenarios(func() string {
		// One replica: the controller Pod is the one that acts.
		pods := s.waitPodsReady(mlNS, "component=controller", 1, time.Minute)
		return pods[0]
	}, mlNS)
}

// runServiceLB: service-lb installed by the chart, reading MetalLB's pools (--pool-api=metallb
// through the chart value), two replicas, the leader holding the Lease.
func (s *suite) runServiceLB() {
	t := s.t
	if s.cfg.helm == "" || s.cfg.chart == "" || s.cfg.registry == "" || s.cfg.tag == "" {
		t.Fatal("service-lb needs KCM_SPLIT_LB_E2E_HELM, _CHART, _IMAGE_REGISTRY and _IMAGE_TAG (e2e.sh sets them)")
	}
	helm := func(args ...string) {
		t.Helper()
		out, err := exec.CommandContext(s.ctx, s.cfg.helm, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	helm("install", release, s.cfg.chart, "-n", releaseNS,
		"--set", "controllers.servicelb.enabled=true",
		"--set", "controllers.servicelb.flags.pool-api=metallb",
		// make up applied the pool CRD itself (kubectl apply): the release must not own it.
		"--set", "crds.install=false",
		"--set", "defaults.image.registry="+s.cfg.registry,
		"--set-string", "defaults.image.tag="+s.cfg.tag, // a commit hash can be all digits
		"--set", "defaults.nodeSelector.kubernetes\\.io/hostname="+s.cfg.node)
	t.Cleanup(func() {
		out, err := exec.Command(s.cfg.helm, "uninstall", release, "-n", releaseNS, "--wait", "--timeout", "2m").CombinedOutput()
		if err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})
	sel := "app.kubernetes.io/instance=" + release
	s.waitPodsReady(releaseNS, sel, 2, 2*time.Minute)
	s.scenarios(func() string { return s.leaseHolder(releaseNS, "service-lb-controller", sel) }, releaseNS)
}

// leaseHolder waits until the Lease is held by one of the Ready Pods of sel; returns that Pod.
func (s *suite) leaseHolder(ns, lease, sel string) string {
	var holder string
	err := wait.PollUntilContextTimeout(s.ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := s.cs.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		h := *l.Spec.HolderIdentity
		if i := strings.LastIndex(h, "_"); i > 0 {
			h = h[:i]
		}
		pods, err := s.readyPods(ns, sel)
		if err != nil || !slices.Contains(pods, h) {
			return false, nil
		}
		holder = h
		return true, nil
	})
	if err != nil {
		s.t.Fatalf("no Ready Pod of %s holds Lease %s/%s: %v", sel, ns, lease, err)
	}
	return holder
}

// scenarios are the same for every controller: first answer, the acting Pod deleted under
// traffic, a Service deleted and its address reused, then created -> first answer over 20
// Services. leader returns the Pod that acts now.
func (s *suite) scenarios(leader func() string, ctrlNS string) {
	t := s.t

	// 1. A Service in front of the Deployment: the client gets a Pod's answer.
	start := time.Now()
	ip := s.createService("web", "")
	assigned := time.Since(start)
	programmed := s.dataPath(ip, start)
	answer, first := s.firstAnswer(ip, start, time.Minute)
	if !slices.Contains(s.pods, answer) {
		t.Fatalf("http://%s/hostname answered %q, not one of the Pods %v", ip, answer, s.pods)
	}
	t.Logf("web: %s, address after %v, programmed on the node after %v, first answer %q after %v", ip, assigned.Round(time.Millisecond),
		programmed.Round(time.Millisecond), answer, first.Round(time.Millisecond))

	// 2. The acting controller Pod deleted while the client sends a request every 100 ms.
	s.leaderDeleted(leader(), ctrlNS, ip)

	// 3. The Service deleted: its address stops answering and goes back to the pool.
	s.deleteService("web")
	s.stopsAnswering(ip, 30*time.Second)
	start = time.Now()
	again := s.createService("reuse", ip)
	if again != ip {
		t.Fatalf("Service reuse asked for the freed %s and got %s", ip, again)
	}
	s.dataPath(ip, start)
	if answer, _ := s.firstAnswer(ip, start, time.Minute); !slices.Contains(s.pods, answer) {
		t.Fatalf("http://%s/hostname answered %q after the address's reuse, not one of %v", ip, answer, s.pods)
	}
	t.Logf("reuse: the freed %s went to a new Service, which answers (%v)", ip, time.Since(start).Round(time.Millisecond))
	s.deleteService("reuse")
	s.stopsAnswering(ip, 30*time.Second)

	// 4. Created -> first answer, one Service after the other.
	var toAddr, toProgrammed, toAnswer []time.Duration
	for i := range latencyServices {
		name := fmt.Sprintf("lat-%02d", i)
		start := time.Now()
		ip := s.createService(name, "")
		toAddr = append(toAddr, time.Since(start))
		toProgrammed = append(toProgrammed, s.dataPath(ip, start))
		answer, d := s.firstAnswer(ip, start, time.Minute)
		if !slices.Contains(s.pods, answer) {
			t.Fatalf("%s: http://%s/hostname answered %q", name, ip, answer)
		}
		toAnswer = append(toAnswer, d)
	}
	figure(t, fmt.Sprintf("Service created -> address in status, %d Services: p50 %v p99 %v", latencyServices, pct(toAddr, 50), pct(toAddr, 99)))
	figure(t, fmt.Sprintf("Service created -> programmed by kube-proxy on the node, %d Services: p50 %v p99 %v", latencyServices, pct(toProgrammed, 50), pct(toProgrammed, 99)))
	if l, err := dataplane.ProxyLatency(s.ctx, s.cfg.proxyMetrics); err == nil {
		figure(t, "kube-proxy: "+l)
	} else {
		t.Logf("kube-proxy's metrics: %v", err)
	}
	figure(t, fmt.Sprintf("Service created -> first successful client request, %d Services: p50 %v p99 %v", latencyServices, pct(toAnswer, 50), pct(toAnswer, 99)))
	for i := range latencyServices {
		s.deleteService(fmt.Sprintf("lat-%02d", i))
	}
}

// dataPath: before the client sends to ip, the route to it stays on the machine (the client's
// namespace has no default route; the node's route is the test's link, not its uplink) and
// kube-proxy sends ip:80 to exactly the workload's Pods. Returns the time from start until then.
func (s *suite) dataPath(ip string, start time.Time) time.Duration {
	s.t.Helper()
	for _, ns := range []string{netnsName, ""} {
		if _, err := dataplane.CheckRoute(ns, ip); err != nil {
			s.t.Fatal(err)
		}
	}
	want := make([]string, len(s.podIPs))
	for i, p := range s.podIPs {
		want[i] = net.JoinHostPort(p, "8080")
	}
	if _, err := dataplane.WaitProgrammed(s.ctx, ip, 80, want, 2*time.Minute); err != nil {
		s.diagnose(ip)
		s.t.Fatal(err)
	}
	return time.Since(start)
}

// leaderDeleted deletes the acting Pod while a request goes out every 100 ms (at most 600, for at
// most 60 s past the deletion), and a new Service is created once the Pod is gone: the first
// Service's address must stay what it was throughout; failures and timings are printed.
// Over 80 lines: the request loop and the address sampler run as goroutines across the deletion, and are stopped and read after it in one place.
func (s *suite) leaderDeleted(pod, ns, ip string) {
	t := s.t
	var (
		sent, failed atomic.Int64
		firstFail    string
		mu           sync.Mutex
	)
	ctx, stop := context.WithCancel(s.ctx)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 600; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			sent.Add(1)
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			answer, err := s.client.Get(rctx, "http://"+ip+"/hostname")
			cancel()
			if ctx.Err() != nil {
				sent.Add(-1)
				return
			}
			if err != nil || !slices.Contains(s.pods, answer) {
				failed.Add(1)
				mu.Lock()
				if firstFail == "" {
					firstFail = fmt.Sprintf("%q %v", answer, err)
				}
				mu.Unlock()
			}
		}
	}()
	// The address as the controller keeps it, sampled while the other controller takes over.
	var changed []string
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for ctx.Err() == nil {
			svc, err := s.cs.CoreV1().Services(appNS).Get(ctx, "web", metav1.GetOptions{})
			if err == nil {
				if got := ingressIP(svc); got != ip {
					mu.Lock()
					changed = append(changed, fmt.Sprintf("%s at %s", orNone(got), time.Now().Format("15:04:05.000")))
					mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()

	// service-lb's Pods log json: follow the leader's and the standbys' logs across the
	// deletion, for the handover's phases (a Pod's log goes with it).
	var oldLog *handover.PodLog
	var standbyLogs []*handover.PodLog
	if ns == releaseNS {
		oldLog = handover.Follow(s.ctx, s.cs, ns, pod)
		pods, err := s.readyPods(ns, "app.kubernetes.io/instance="+release)
		if err != nil {
			t.Logf("listing the standbys: %v", err)
		}
		for _, p := range pods {
			if p != pod {
				standbyLogs = append(standbyLogs, handover.Follow(s.ctx, s.cs, ns, p))
			}
		}
	}
	time.Sleep(time.Second)
	deleted := time.Now()
	if err := s.cs.CoreV1().Pods(ns).Delete(s.ctx, pod, metav1.DeleteOptions{}); err != nil {
		stop()
		t.Fatalf("delete Pod %s/%s: %v", ns, pod, err)
	}
	// The new Service is created only once the deleted Pod is gone, so that the old process
	// cannot be the one that serves it.
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := s.cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		stop()
		t.Fatalf("Pod %s/%s still there a minute after its deletion", ns, pod)
	}
	gone := time.Since(deleted)
	probeIP := s.createService("after-delete", "")
	served := time.Since(deleted)
	// Two more seconds of requests after the new Service is served, then stop.
	select {
	case <-loopDone:
	case <-time.After(2 * time.Second):
	}
	stop()
	<-loopDone
	<-watchDone
	s.deleteService("after-delete")

	if len(changed) > 0 {
		t.Fatalf("the address of Service web changed from %s while the controller Pod was replaced: %v", ip, changed)
	}
	figure(t, fmt.Sprintf("controller Pod %s deleted -> Pod gone %v -> new Service addressed (%s) %v", pod, gone.Round(time.Millisecond), probeIP, served.Round(time.Millisecond)))
	if oldLog != nil {
		phases := handover.Collect(oldLog, standbyLogs, deleted, 10*time.Second)
		if err := oldLog.Err(); err != nil {
			t.Logf("following %s's log: %v", pod, err)
		}
		figure(t, fmt.Sprintf("controller Pod %s deleted: %s; Pod gone %.3fs", pod, phases.String(deleted, "delete call"), gone.Seconds()))
	}
	figure(t, fmt.Sprintf("requests every 100 ms to %s during the replacement: %d sent, %d failed (goal 0)%s", ip, sent.Load(), failed.Load(), firstNote(firstFail)))
}

func firstNote(s string) string {
	if s == "" {
		return ""
	}
	return "; first failure: " + s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// createService creates a LoadBalancer Service in front of the workload (asking for ip if set,
// by MetalLB's annotation) and waits until its status holds one address from the pool.
func (s *suite) createService(name, ip string) string {
	t := s.t
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appNS},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if ip != "" {
		svc.Annotations = map[string]string{"metallb.io/loadBalancerIPs": ip}
	}
	if _, err := s.cs.CoreV1().Services(appNS).Create(s.ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got string
	err := wait.PollUntilContextTimeout(s.ctx, 20*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		svc, err := s.cs.CoreV1().Services(appNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = ingressIP(svc)
		return got != "", nil
	})
	if err != nil {
		t.Fatalf("Service %s got no address in 90s", name)
	}
	if !strings.HasPrefix(got, "198.18.100.") {
		t.Fatalf("Service %s got %s, outside the pool %s", name, got, poolRange)
	}
	return got
}

// deleteServices deletes every Service of the workload's namespace and waits until they are gone.
func (s *suite) deleteServices() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := s.cs.CoreV1().Services(appNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Errorf("list the Services of %s: %v", appNS, err)
		return
	}
	for _, svc := range l.Items {
		if err := s.cs.CoreV1().Services(appNS).Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			s.t.Errorf("delete Service %s: %v", svc.Name, err)
		}
	}
	err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		l, err := s.cs.CoreV1().Services(appNS).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	})
	if err != nil {
		s.t.Errorf("Services of %s still there 2m after their deletion", appNS)
	}
}

// deleteService deletes a Service and waits until it is gone.
func (s *suite) deleteService(name string) {
	t := s.t
	if err := s.cs.CoreV1().Services(appNS).Delete(s.ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete Service %s: %v", name, err)
	}
	err := wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := s.cs.CoreV1().Services(appNS).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("Service %s still there a minute after its deletion", name)
	}
}

// firstAnswer sends a request every 50 ms (each on its own connection, 1 s timeout, at most 20 in
// flight) until one is answered; returns the answer and the time from start to that answer.
func (s *suite) firstAnswer(ip string, start time.Time, limit time.Duration) (string, time.Duration) {
	ctx, cancel := context.WithTimeout(s.ctx, limit)
	defer cancel()
	type result struct {
		answer string
		at     time.Time
	}
	won := make(chan result, 1)
	slots := make(chan struct{}, 20)
	var wg sync.WaitGroup
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var errs errCounts
loop:
	for {
		select {
		case r := <-won:
			cancel()
			wg.Wait()
			return r.answer, r.at.Sub(start)
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			defer rcancel()
			answer, err := s.client.Get(rctx, "http://"+ip+"/hostname")
			if err != nil {
				errs.add(err)
				return
			}
			select {
			case won <- result{answer, time.Now()}:
			default:
			}
		}()
	}
	wg.Wait()
	select {
	case r := <-won:
		return r.answer, r.at.Sub(start)
	default:
	}
	s.diagnose(ip)
	s.t.Fatalf("no answer from http://%s/hostname within %v (errors: %v)", ip, limit, errs.summary())
	return "", 0
}

// errCounts counts request errors by message, for a failure's report.
type errCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *errCounts) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[err.Error()]++
}

func (e *errCounts) summary() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for m, n := range e.n {
		out = append(out, fmt.Sprintf("%dx %s", n, m))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// diagnose logs what tells where packets to ip stop: the client's neighbour table, the link's
// counters, kube-proxy's rules for the address, the speaker's last log lines.
func (s *suite) diagnose(ip string) {
	t := s.t
	for _, c := range [][]string{
		{"ip", "-n", netnsName, "neigh", "show"},
		{"ip", "-n", netnsName, "-s", "link", "show", peerLink},
		{"ip", "-s", "link", "show", hostLink},
		{"sh", "-c", "iptables-save -t nat | grep -F " + ip},
		{"sh", "-c", "sysctl net.ipv4.ip_forward net.ipv4.conf.all.rp_filter net.ipv4.conf." + hostLink + ".rp_filter; iptables -S FORWARD | head -5"},
	} {
		out, err := exec.Command(c[0], c[1:]...).CombinedOutput()
		t.Logf("diagnose: %s (%v):\n%s", strings.Join(c, " "), err, out)
	}
	pods, err := s.cs.CoreV1().Pods(mlNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		b, err := s.cs.CoreV1().Pods(mlNS).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr(int64(40))}).DoRaw(context.Background())
		t.Logf("diagnose: logs of %s (%v):\n%s", p.Name, err, b)
	}
}

// stopsAnswering waits until 10 requests in a row to ip fail (the final state: a single failure
// could be a blip while it still answers).
func (s *suite) stopsAnswering(ip string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	start := time.Now()
	inRow := 0
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(s.ctx, 500*time.Millisecond)
		_, err := s.client.Get(ctx, "http://"+ip+"/hostname")
		cancel()
		if err != nil {
			inRow++
			if inRow == 10 {
				s.t.Logf("%s stopped answering (%v after the Service's deletion was seen)", ip, time.Since(start).Round(time.Millisecond))
				return
			}
		} else {
			inRow = 0
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("%s still answers %v after its Service was deleted", ip, limit)
}

// readyPods lists the names of the Ready, not terminating Pods of sel.
func (s *suite) readyPods(ns, sel string) ([]string, error) {
	pl, err := s.cs.CoreV1().Pods(ns).List(s.ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, p := range pl.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				names = append(names, p.Name)
			}
		}
	}
	sort.Strings(names)
	return names, nil
}

// waitPodsReady waits until exactly n Pods of sel are Ready and none is terminating.
func (s *suite) waitPodsReady(ns, sel string, n int, limit time.Duration) []string {
	var names []string
	err := wait.PollUntilContextTimeout(s.ctx, 250*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		pl, err := s.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, nil
		}
		if len(pl.Items) != n {
			return false, nil
		}
		names, err = s.readyPods(ns, sel)
		return err == nil && len(names) == n, nil
	})
	if err != nil {
		s.t.Fatalf("%d Ready Pods of %s/%s within %v: %v (have %v)", n, ns, sel, limit, err, names)
	}
	return names
}

func (s *suite) podsGone(ns, sel string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		pl, err := s.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		return err == nil && len(pl.Items) == 0, nil
	}
}

// deleteAndWait runs del and waits until gone holds (cleanups: a fresh context, errors reported).
func (s *suite) deleteAndWait(what string, gone func(context.Context) (bool, error), del func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := del(ctx); err != nil && !apierrors.IsNotFound(err) {
		s.t.Errorf("delete %s: %v", what, err)
		return
	}
	if err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, gone); err != nil {
		s.t.Errorf("%s: its Pods still there 2m after its deletion", what)
	}
}

func deleteDS(cs kubernetes.Interface, ns, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		return cs.AppsV1().DaemonSets(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationForeground)})
	}
}

func ingressIP(svc *corev1.Service) string {
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			return in.IP
		}
	}
	return ""
}

// pct is the nearest-rank percentile p of ds, rounded to the millisecond.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	i = max(0, min(i, len(s)-1))
	return s[i].Round(time.Millisecond)
}

// figure prints a measured figure (never asserted); e2e.sh collects the FIGURE lines.
func figure(t *testing.T, msg string) {
	t.Helper()
	t.Logf("FIGURE %s: %s", t.Name(), msg)
	fmt.Printf("FIGURE %s: %s\n", t.Name(), msg)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func ptr[T any](v T) *T { return &v }
