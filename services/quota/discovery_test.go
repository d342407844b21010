package quota

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

// TestPodsListWhileDiscoveryAnswers: on start the core types' informers (the Pods, the longest
// list) do not wait for discovery, and the types only discovery places start once it answers.
func TestPodsListWhileDiscoveryAnswers(t *testing.T) {
	rq := quotaObj("ns", "q", rl("pods", "5", "count/widgets.example.com", "5"))
	client := fake.NewClientset(rq, namedPod("ns", "a"))
	podsListed := make(chan struct{})
	var once sync.Once
	client.PrependReactor("list", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(podsListed) })
		return false, nil, nil
	})
	discover := func() (map[schema.GroupResource]string, map[string]string, error) {
		select {
		case <-podsListed:
			return map[schema.GroupResource]string{widgetsResource: "v1"}, nil, nil
		case <-time.After(10 * time.Second):
			return nil, nil, errors.New("the Pods were not listed while discovery was pending")
		}
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	meta := metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme())
	c := New(factory.Core().V1().ResourceQuotas(), client, meta, discover, record.NewFakeRecorder(100), DefaultOptions(), prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		factory.Shutdown()
	}()
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return c.HasSynced(), nil
	}); err != nil {
		t.Fatal("the controller never started its monitors")
	}
	c.monitors.mu.Lock()
	_, pods := c.monitors.byGR[podsResource]
	_, widgets := c.monitors.byGR[widgetsResource]
	c.monitors.mu.Unlock()
	if !pods || !widgets {
		t.Errorf("informers started: pods %v, widgets.example.com %v; want both", pods, widgets)
	}
	if _, _, reason := c.monitors.getOrStart(widgetsResource); strings.Contains(reason, "does not serve") {
		t.Errorf("widgets.example.com is still unknown after discovery: %s", reason)
	}
}
