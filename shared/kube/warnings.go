package kube

import (
	"context"
	"sync"

	"k8s.io/klog/v2"
)

// dedupWarnings logs each distinct apiserver warning once per process. The endpoints
// controller writes core/v1 Endpoints, which the apiserver answers with a deprecation warning
// on every request; repeating it on every write buries the log lines that matter.
type dedupWarnings struct{ seen sync.Map }

func (d *dedupWarnings) HandleWarningHeaderWithContext(ctx context.Context, code int, agent, text string) {
	if code != 299 || text == "" {
		return
	}
	if _, loaded := d.seen.LoadOrStore(text, struct{}{}); loaded {
		return
	}
	klog.FromContext(ctx).Info("Warning from the API server (logged once)", "warning", text)
}
