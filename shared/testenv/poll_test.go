package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A missing object is nil to cond (not client-go's empty object), other errors are polled
// past, and a timeout returns the last object seen.
func TestPollObject(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "x")
	answers := []struct {
		obj *corev1.ConfigMap
		err error
	}{
		{&corev1.ConfigMap{}, notFound},
		{nil, errors.New("connection refused")},
		{&corev1.ConfigMap{Data: map[string]string{"n": "1"}}, nil},
		{&corev1.ConfigMap{Data: map[string]string{"n": "2"}}, nil},
	}
	var calls int
	get := func(context.Context) (*corev1.ConfigMap, error) {
		a := answers[min(calls, len(answers)-1)]
		calls++
		return a.obj, a.err
	}
	var sawNil bool
	last, ok := PollObject(time.Millisecond, 10*time.Second, get, func(cm *corev1.ConfigMap) bool {
		sawNil = sawNil || cm == nil
		return cm != nil && cm.Data["n"] == "2"
	})
	if !ok || last.Data["n"] != "2" || !sawNil || calls != 4 {
		t.Fatalf("PollObject = %v, %v after %d calls (saw nil %v), want the second version after 4", last, ok, calls, sawNil)
	}
	calls = 2
	last, ok = PollObject(time.Millisecond, 50*time.Millisecond, get, func(cm *corev1.ConfigMap) bool { return false })
	if ok || last == nil || last.Data["n"] != "2" {
		t.Fatalf("on timeout PollObject = %v, %v, want false and the last object seen", last, ok)
	}
}
