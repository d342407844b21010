package namespace

import (
	"testing"

	"github.com/kcm-split/kcm-split/shared/benchkit"
	"github.com/kcm-split/kcm-split/shared/informer"
)

// TestCacheBytesPerObject reports (never asserts) the heap bytes one cached object of each type
// this controller watches costs as the apiserver lists it, and after the informer transform:
// go test -run TestCacheBytesPerObject -v. deploy/tests/scale/README.md tabulates them.
func TestCacheBytesPerObject(t *testing.T) {
	benchkit.ReportCacheBytes(t, "namespace",
		benchkit.Cached{Kind: "Namespace", Transform: informer.DropManagedFields},
	)
}
