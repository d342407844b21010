package quota

import (
	"testing"

	"github.com/kcm-split/kcm-split/shared/benchkit"
)

// TestCacheBytesPerObject reports (never asserts) the heap bytes one cached object of each type
// this controller watches costs as the apiserver lists it, and after the informer transform:
// go test -run TestCacheBytesPerObject -v. deploy/tests/scale/README.md tabulates them.
func TestCacheBytesPerObject(t *testing.T) {
	benchkit.ReportCacheBytes(t, "quota",
		benchkit.Cached{Kind: "Pod", Transform: podTransform(DefaultOptions().PodResources)},
		benchkit.Cached{Kind: "Service", Transform: trimService},
		benchkit.Cached{Kind: "ConfigMap", Transform: trimMeta, Metadata: true},
	)
}
