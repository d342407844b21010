package namespace_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/services/namespace"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// The aggregated API of the drill: it serves a cluster-scoped resource and a namespaced one
// that can only be created (a review), so nothing of it can be left in a namespace.
const (
	idleGroup   = "idle.kcm-split.test"
	idleVersion = "v1"
	idleService = "kcm-split-idle"
)

var idleGV = idleGroup + "/" + idleVersion

// serveIdleAPI starts the aggregated API server (TLS on loopback) and returns its port.
func serveIdleAPI(t *testing.T) int {
	t.Helper()
	list := metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: idleGV,
		APIResources: []metav1.APIResource{
			{Name: "gadgets", Kind: "Gadget", Namespaced: false, Verbs: []string{"create", "delete", "get", "list"}},
			{Name: "gadgetreviews", Kind: "GadgetReview", Namespaced: true, Verbs: []string{"create"}},
		},
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Legacy discovery only: the aggregator falls back to it when /apis is not found.
		if r.URL.Path != "/apis/"+idleGV {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(list)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// setIdleService creates (up) or deletes (down) the Service the APIService points at: an
// ExternalName to loopback, where the aggregator finds the test's server.
func setIdleService(t *testing.T, client kubernetes.Interface, up bool) {
	t.Helper()
	svcs := client.CoreV1().Services("default")
	if !up {
		if err := svcs.Delete(context.Background(), idleService, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return
	}
	_, err := svcs.Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: idleService},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "127.0.0.1"},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// idleDiscovered reports whether the apiserver's discovery serves the idle group version
// (true), reports it failing (false), or neither yet (error).
func idleDiscovered(client kubernetes.Interface) (bool, error) {
	lists, err := client.Discovery().ServerPreferredResources()
	var failed *discovery.ErrGroupDiscoveryFailed
	if errors.As(err, &failed) {
		for gv := range failed.Groups {
			if gv.String() == idleGV {
				return false, nil
			}
		}
	} else if err != nil {
		return false, err
	}
	for _, l := range lists {
		if l.GroupVersion == idleGV {
			return true, nil
		}
	}
	return false, fmt.Errorf("%s not in discovery", idleGV)
}

func waitIdle(t *testing.T, client kubernetes.Interface, want bool) {
	t.Helper()
	poll(t, time.Minute, fmt.Sprintf("discovery of %s to answer=%v", idleGV, want), func(context.Context) (bool, error) {
		got, err := idleDiscovered(client)
		return err == nil && got == want, nil
	})
}

func namespaceEvents(t *testing.T, client kubernetes.Interface, ns, reason string) []corev1.Event {
	t.Helper()
	evs, err := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Namespace,involvedObject.name=" + ns + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	return evs.Items
}

// createIdleAPIService registers the idle API's APIService, pointing at port through the
// Service setIdleService makes; both go when the test ends.
func createIdleAPIService(t *testing.T, client kubernetes.Interface, dyn dynamic.Interface, port int) {
	t.Helper()
	apiServices := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": idleVersion + "." + idleGroup},
		"spec": map[string]any{
			"group": idleGroup, "version": idleVersion,
			"service":               map[string]any{"namespace": "default", "name": idleService, "port": int64(port)},
			"insecureSkipTLSVerify": true,
			"groupPriorityMinimum":  int64(1000),
			"versionPriority":       int64(15),
		},
	}}
	if _, err := dyn.Resource(apiServices).Create(context.Background(), apiService, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = dyn.Resource(apiServices).Delete(context.Background(), idleVersion+"."+idleGroup, metav1.DeleteOptions{})
		setIdleService(t, client, false)
	})
}

// stillBlocked waits for hold (longer than the flag's duration, so a wrongly excused group
// would have been excused), then checks the namespace is still there with its finalizer and
// no Event says it was finalized.
func stillBlocked(t *testing.T, client kubernetes.Interface, ns string, hold time.Duration) {
	t.Helper()
	time.Sleep(hold)
	cur, err := client.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("namespace %s: %v; want it blocked", ns, err)
	}
	if !slices.Contains(cur.Spec.Finalizers, corev1.FinalizerKubernetes) {
		t.Fatalf("namespace %s finalized while it must stay blocked", ns)
	}
	if evs := namespaceEvents(t, client, ns, namespace.EventFinalizedWithUnavailableAPIs); len(evs) > 0 {
		t.Fatalf("%s Event on a blocked namespace: %s", namespace.EventFinalizedWithUnavailableAPIs, evs[0].Message)
	}
}

// TestUnavailableGroupDrill: an aggregated API that served nothing that can be in a
// namespace goes away (its APIService points at a Service that no longer exists).
//   - Without --allow-deletion-with-unavailable-groups, a namespace waits for it, as upstream.
//   - With it, a controller that never saw the API answer still waits: unknown is not gone.
//   - Once that controller has seen it answer and it goes away again, a namespace deleted
//     then is emptied and finalized after the flag's duration, with an Event naming the API,
//     and nothing listable is left in it.
//
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func TestUnavailableGroupDrill(t *testing.T) {
	testenv.Require(t, env)
	client := env.Client(t)
	dyn := dynamicClient(t)
	const allowed = 3 * time.Second
	hold := allowed + 3*time.Second

	createIdleAPIService(t, client, dyn, serveIdleAPI(t))
	// The API answers (the aggregator reaches the test's server), then its Service goes.
	setIdleService(t, client, true)
	waitIdle(t, client, true)
	setIdleService(t, client, false)
	waitIdle(t, client, false)

	// 1. Upstream's behaviour (no flag): blocked.
	upstream := env.StartLeading(t, controller, "upstream")
	first := newNamespace(t, client, "idle-upstream")
	createConfigMaps(t, client, first, 5)
	deleteNamespace(t, client, first)
	waitCondition(t, client, first, corev1.NamespaceDeletionDiscoveryFailure, idleGV)
	poll(t, goneTimeout, "the first namespace's ConfigMaps to be deleted", func(ctx context.Context) (bool, error) {
		return countConfigMaps(t, client, first) == 0, nil
	})
	stillBlocked(t, client, first, hold)
	if !upstream.Stop(30 * time.Second) {
		t.Fatal("the first controller did not stop")
	}

	// 2. With the flag, in a process that never saw the API answer: still blocked.
	flagged := env.StartLeading(t, controller, "flagged", "--"+namespace.FlagAllowDeletionWithUnavailableGroups+"="+allowed.String())
	poll(t, time.Minute, "the flagged controller to find the API unavailable and never discovered", func(context.Context) (bool, error) {
		return flagged.Metric(`kcm_split_namespace_unavailable_group_versions{last_discovery="none"}`) >= 1, nil
	})
	stillBlocked(t, client, first, hold)

	// The API answers again: the first namespace goes the ordinary way, which takes a
	// complete discovery, so the controller has now seen the API answer.
	setIdleService(t, client, true)
	waitGone(t, client, first)

	// 3. The API goes away again; a namespace deleted now is finalized once the API has been
	// unavailable for the flag's duration.
	setIdleService(t, client, false)
	waitIdle(t, client, false)
	second := newNamespace(t, client, "idle-flagged")
	createConfigMaps(t, client, second, 5)
	createSecrets(t, client, second, 5)
	start := time.Now()
	deleteNamespace(t, client, second)
	waitGone(t, client, second)
	took := time.Since(start)
	// The Event and the counter follow the finalize call, which is what made the namespace go.
	var evs []corev1.Event
	poll(t, time.Minute, "the "+namespace.EventFinalizedWithUnavailableAPIs+" Event and counter", func(context.Context) (bool, error) {
		evs = namespaceEvents(t, client, second, namespace.EventFinalizedWithUnavailableAPIs)
		return len(evs) > 0 && flagged.Metric(`kcm_split_namespace_finalized_with_unavailable_apis_total`) == 1, nil
	})
	if len(evs) != 1 || evs[0].Type != corev1.EventTypeWarning || !strings.Contains(evs[0].Message, idleGV) {
		t.Fatalf("want one Warning %s Event naming %s, got %+v", namespace.EventFinalizedWithUnavailableAPIs, idleGV, evs)
	}
	// Nothing listable leaked: the namespace's objects were deleted and verified gone
	// before it was finalized.
	if n := countConfigMaps(t, client, second); n != 0 {
		t.Fatalf("%d ConfigMaps leaked", n)
	}
	if secrets, err := client.CoreV1().Secrets(second).List(context.Background(), metav1.ListOptions{}); err != nil || len(secrets.Items) != 0 {
		t.Fatalf("Secrets leaked: %v %v", secrets, err)
	}
	t.Logf("namespace deleted -> finalized with %s unavailable: %s (5 s grace, --%s=%s); Event: %s",
		idleGV, took.Round(time.Millisecond), namespace.FlagAllowDeletionWithUnavailableGroups, allowed, evs[0].Message)
}
