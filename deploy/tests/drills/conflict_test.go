package drills

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// fightLength is how long the second writer undoes each controller's work.
const fightLength = 60 * time.Second

// fight is a second writer undoing a controller's status on one object, once a second.
type fight struct {
	name string
	bin  testenv.Binary
	args []string
	// prepare creates the object and returns its resource and name, once the controller
	// has written its state (ready reports that).
	prepare func(ctx context.Context, c kubernetes.Interface, ns string) (resource, name string)
	ready   func(ctx context.Context, c kubernetes.Interface, ns string) (bool, error)
	// undo overwrites the controller's state.
	undo func(ctx context.Context, c kubernetes.Interface, ns string) error
	// bound, when set, caps the controller's writes in the whole fight (its own backoff).
	bound int
	// release, when set, lets the object go after the fight.
	release func(ctx context.Context, c kubernetes.Interface, ns string) error
}

// TestSustainedConflicts runs a second writer against each controller's state for 60 s, a
// write a second. The controller may answer, but never with more writes than the fight
// itself (no write war, no hot loop); service-lb stays within its own backoff.
func TestSustainedConflicts(t *testing.T) {
	testenv.Require(t, env)
	for _, fg := range fights() {
		t.Run(fg.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c := env.Client(t)
			ns := env.Namespace(t)
			if fg.name == "servicelb" {
				setupPool(t, ns)
			}
			ctrl := env.StartLeading(t, fg.bin, fg.name, fg.args...)
			res, name := fg.prepare(ctx, c, ns)
			if fg.release != nil {
				t.Cleanup(func() {
					if err := fg.release(context.Background(), c, ns); err != nil {
						t.Errorf("releasing %s %s: %v", res, name, err)
					}
				})
			}
			if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				return fg.ready(ctx, c, ns)
			}); err != nil {
				t.Fatalf("the controller never wrote its state on %s %s: %v", res, name, err)
			}
			start := time.Now()
			undone := 0
			for time.Since(start) < fightLength {
				if err := fg.undo(ctx, c, ns); err != nil {
					t.Logf("undo: %v", err)
				} else {
					undone++
				}
				time.Sleep(time.Second)
			}
			time.Sleep(2 * time.Second) // the answer to the last undo
			on := func(ev testenv.AuditEvent) bool {
				return ev.ObjectRef.Resource == res && ev.ObjectRef.Name == name && ev.Succeeded()
			}
			writes, err := env.Writes(testenv.ByIdentity(ctrl.Identity()), testenv.ReceivedAfter(start), on)
			if err != nil {
				t.Fatal(err)
			}
			bound := undone + 5
			if fg.bound > 0 {
				bound = fg.bound
			}
			if len(writes) > bound {
				t.Errorf("%d writes by the controller on %s %s against %d by the second writer in %s: a write war (bound %d)", len(writes), res, name, undone, fightLength, bound)
			}
			if ctrl.Exited() {
				t.Fatalf("controller exited (%d)", ctrl.ExitCode())
			}
			report(t, "sustained conflicts (a second writer undoes the state every second for 60 s)", fg.name,
				fmt.Sprintf("%d controller writes/min on the object against %d by the second writer", len(writes), undone))
		})
	}
}

func setupPool(t *testing.T, ns string) {
	sc := serviceLBScenario()
	f := newFixture(t)
	f.ns = ns
	sc.setup(f)
}

// Over 80 lines: a table of the six fights, each a controller's prepare, ready and undo closures, read top to bottom.
func fights() []fight {
	wrongIP := "198.51.100.250"
	return []fight{
		{
			name: "endpoints", bin: bin("endpoints-controller", "endpoints"),
			prepare: func(ctx context.Context, c kubernetes.Interface, ns string) (string, string) {
				f := &fixture{c: c, ns: ns, run: "fight"}
				sc := endpointsScenario()
				svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
					Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
				_, _ = c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
				_ = sc.step(ctx, f, 0)
				return "endpoints", "web"
			},
			ready: func(ctx context.Context, c kubernetes.Interface, ns string) (bool, error) {
				ep, err := c.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{})
				return err == nil && len(ep.Subsets) == 1 && len(ep.Subsets[0].Addresses) == 1, nil
			},
			undo: func(ctx context.Context, c kubernetes.Interface, ns string) error {
				ep, err := c.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{})
				if err != nil {
					return err
				}
				ep.Subsets = []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: wrongIP}}, Ports: []corev1.EndpointPort{{Port: 8080}}}}
				_, err = c.CoreV1().Endpoints(ns).Update(ctx, ep, metav1.UpdateOptions{})
				return err
			},
		},
		{
			name: "quota", bin: bin("quota-controller", "quota"),
			prepare: func(ctx context.Context, c kubernetes.Interface, ns string) (string, string) {
				q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: ns},
					Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": resource.MustParse("100")}}}
				_, _ = c.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{})
				return "resourcequotas", "q"
			},
			ready: func(ctx context.Context, c kubernetes.Interface, ns string) (bool, error) {
				q, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, "q", metav1.GetOptions{})
				return err == nil && q.Status.Used != nil, nil
			},
			undo: func(ctx context.Context, c kubernetes.Interface, ns string) error {
				q, err := c.CoreV1().ResourceQuotas(ns).Get(ctx, "q", metav1.GetOptions{})
				if err != nil {
					return err
				}
				q.Status.Used = corev1.ResourceList{"count/configmaps": resource.MustParse("99")}
				_, err = c.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{})
				return err
			},
		},
		{
			name: "servicelb", bin: bin("service-lb-controller", "servicelb"),
			// Its own backoff: at 0, 5, 15, 35 s, then every 5 minutes.
			bound: 6,
			prepare: func(ctx context.Context, c kubernetes.Interface, ns string) (string, string) {
				svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb", Namespace: ns},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
				_, _ = c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
				return "services", "lb"
			},
			ready: func(ctx context.Context, c kubernetes.Interface, ns string) (bool, error) {
				s, err := c.CoreV1().Services(ns).Get(ctx, "lb", metav1.GetOptions{})
				return err == nil && len(s.Status.LoadBalancer.Ingress) == 1, nil
			},
			undo: func(ctx context.Context, c kubernetes.Interface, ns string) error {
				s, err := c.CoreV1().Services(ns).Get(ctx, "lb", metav1.GetOptions{})
				if err != nil {
					return err
				}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: wrongIP}}
				_, err = c.CoreV1().Services(ns).UpdateStatus(ctx, s, metav1.UpdateOptions{})
				return err
			},
		},
		{
			name: "nodelifecycle", bin: bin("nodelifecycle-controller", "nodelifecycle"),
			prepare: func(ctx context.Context, c kubernetes.Interface, ns string) (string, string) {
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-node"}}
				if _, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err == nil {
					// The controller may write the new Node (its admission taint) first: a
					// status write on the created version would then conflict and the Node
					// would never turn NotReady, so retry on the latest version.
					_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
						out, err := c.CoreV1().Nodes().Get(ctx, ns+"-node", metav1.GetOptions{})
						if err != nil {
							return err
						}
						out.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse,
							LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "Drill"}}
						_, err = c.CoreV1().Nodes().UpdateStatus(ctx, out, metav1.UpdateOptions{})
						return err
					})
				}
				return "nodes", ns + "-node"
			},
			ready: func(ctx context.Context, c kubernetes.Interface, ns string) (bool, error) {
				n, err := c.CoreV1().Nodes().Get(ctx, ns+"-node", metav1.GetOptions{})
				return err == nil && len(n.Spec.Taints) > 0, nil
			},
			undo: func(ctx context.Context, c kubernetes.Interface, ns string) error {
				n, err := c.CoreV1().Nodes().Get(ctx, ns+"-node", metav1.GetOptions{})
				if err != nil {
					return err
				}
				n.Spec.Taints = nil
				_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
				return err
			},
		},
		{
			name: "pvbinder", bin: bin("pv-binder-controller", "pvbinder"),
			prepare: func(ctx context.Context, c kubernetes.Interface, ns string) (string, string) {
				f := &fixture{c: c, ns: ns, run: ns}
				_ = pvScenario().step(ctx, f, 0)
				return "persistentvolumes", f.name("pv", 0)
			},
			ready: func(ctx context.Context, c kubernetes.Interface, ns string) (bool, error) {
				pv, err := c.CoreV1().PersistentVolumes().Get(ctx, fmt.Sprintf("pv-%s-0", ns), metav1.GetOptions{})
				return err == nil && pv.Status.Phase == corev1.VolumeBound, nil
			},
			undo: func(ctx context.Context, c kubernetes.Interface, ns string) error {
				pv, err := c.CoreV1().PersistentVolumes().Get(ctx, fmt.Sprintf("pv-%s-0", ns), metav1.GetOptions{})
				if err != nil {
					return err
				}
				pv.Status.Phase = corev1.VolumeAvailable
				_, err = c.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{})
				return err
			},
		},
		{
			name: "namespace", bin: bin("namespace-controller", "namespace"),
			prepare: func(ctx context.Context, c kubernetes.Interface, ns string) (string, string) {
				name := ns + "-held"
				_, _ = c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: name, Finalizers: []string{"drill.kcm-split.io/hold"}}}
				_, _ = c.CoreV1().ConfigMaps(name).Create(ctx, cm, metav1.CreateOptions{})
				_ = c.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
				return "namespaces", name
			},
			ready: func(ctx context.Context, c kubernetes.Interface, ns string) (bool, error) {
				n, err := c.CoreV1().Namespaces().Get(ctx, ns+"-held", metav1.GetOptions{})
				return err == nil && len(n.Status.Conditions) > 0, nil
			},
			undo: func(ctx context.Context, c kubernetes.Interface, ns string) error {
				n, err := c.CoreV1().Namespaces().Get(ctx, ns+"-held", metav1.GetOptions{})
				if err != nil {
					return err
				}
				n.Status.Conditions = nil
				_, err = c.CoreV1().Namespaces().UpdateStatus(ctx, n, metav1.UpdateOptions{})
				return err
			},
			release: func(ctx context.Context, c kubernetes.Interface, ns string) error {
				cm, err := c.CoreV1().ConfigMaps(ns+"-held").Get(ctx, "held", metav1.GetOptions{})
				if err != nil {
					return err
				}
				cm.Finalizers = nil
				_, err = c.CoreV1().ConfigMaps(ns+"-held").Update(ctx, cm, metav1.UpdateOptions{})
				return err
			},
		},
	}
}
