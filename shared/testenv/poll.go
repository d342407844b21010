package testenv

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// PollObject gets an object every interval, up to timeout, until cond holds for it: cond sees
// nil while the object does not exist, and another error just polls again. It returns the
// last object seen (nil: none, or gone) and whether cond held, so that the caller's failure
// can describe where the object stopped.
func PollObject[T any](interval, timeout time.Duration, get func(context.Context) (*T, error), cond func(*T) bool) (*T, bool) {
	var last *T
	err := wait.PollUntilContextTimeout(context.Background(), interval, timeout, true, func(ctx context.Context) (bool, error) {
		obj, err := get(ctx)
		switch {
		case apierrors.IsNotFound(err):
			last = nil
		case err != nil:
			return false, nil
		default:
			last = obj
		}
		return cond(last), nil
	})
	return last, err == nil
}
