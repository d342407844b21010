package pvbinder

import (
	"reflect"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/shared/benchkit"
)

// The Pod projection keeps every field this controller reads, so the helpers that read Pods
// answer the same for the projection as for the whole Pod; the rest is dropped.
func TestProjectPodKeepsWhatIsRead(t *testing.T) {
	now := metav1.Now()
	full := benchkit.RealisticPod("db", "pg-0", "pg", "", "10.0.0.3")
	benchkit.WithManagedFields(&full.ObjectMeta)
	full.Annotations[AnnRecycledVolume] = "uid-1"
	full.Status.Message = "why"
	full.Spec.Volumes = append(full.Spec.Volumes,
		v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data-pg-0"}}},
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}})
	for _, deleting := range []bool{false, true} {
		if deleting {
			full.DeletionTimestamp = &now
		}
		p := projectPod(full)
		wantKeys, _ := podClaimKeys(full)
		gotKeys, _ := podClaimKeys(p)
		if !slices.Equal(wantKeys, gotKeys) || len(gotKeys) != 2 {
			t.Errorf("claim keys %v, want %v", gotKeys, wantKeys)
		}
		if podTerminated(p) != podTerminated(full) || recycledVolume(p) != recycledVolume(full) {
			t.Errorf("deleting=%v: terminated/recycled differ", deleting)
		}
		if p.Name != full.Name || p.Namespace != full.Namespace || p.UID != full.UID || p.CreationTimestamp != full.CreationTimestamp ||
			p.Status.Phase != full.Status.Phase || p.Status.Message != "why" || p.Annotations[AnnRecycledVolume] != "uid-1" {
			t.Errorf("projection lost a field read: %+v", p)
		}
		if p.ManagedFields != nil || p.Labels != nil || len(p.Annotations) != 1 || p.Spec.Containers != nil || p.OwnerReferences != nil || len(p.Spec.Volumes) != 2 {
			t.Errorf("projection kept a field never read: %+v", p)
		}
	}
	// Statuses: a running container keeps a deleting Pod alive.
	full.Status.ContainerStatuses[0].State = v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	if podTerminated(full) != podTerminated(projectPod(full)) {
		t.Error("container states lost")
	}
	if got, _ := cacheTransform(full); !reflect.DeepEqual(got, projectPod(full)) {
		t.Errorf("the transform's Pod %+v, projectPod's %+v", got, projectPod(full))
	}
	other := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}}
	benchkit.WithManagedFields(&other.ObjectMeta)
	got, _ := cacheTransform(other)
	if got.(*v1.PersistentVolume).ManagedFields != nil || got.(*v1.PersistentVolume).Name != "pv" {
		t.Error("other objects lose only managedFields")
	}
}

// TestCacheBytesPerObject reports (never asserts) what one cached Pod costs before and after
// the transform: go test -run TestCacheBytesPerObject -v.
func TestCacheBytesPerObject(t *testing.T) {
	benchkit.ReportCacheBytes(t, "pvbinder", benchkit.Cached{Kind: "Pod", Transform: cacheTransform})
}
