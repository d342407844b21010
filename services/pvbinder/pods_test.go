package pvbinder

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWaitForPodScheduled(t *testing.T) {
	pod := func(name, node string, phase v1.PodPhase) *v1.Pod {
		return &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
			Spec: v1.PodSpec{NodeName: node, Volumes: []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}}},
			Status: v1.PodStatus{Phase: phase},
		}
	}
	for name, tc := range map[string]struct {
		pods []*v1.Pod
		want string
	}{
		"no pod":   {nil, "Normal WaitForFirstConsumer waiting for first consumer to be created before binding"},
		"one pod":  {[]*v1.Pod{pod("web-0", "", v1.PodPending), pod("done", "", v1.PodSucceeded), pod("placed", "n1", v1.PodPending)}, "Normal WaitForPodScheduled waiting for pod web-0 to be scheduled"},
		"two pods": {[]*v1.Pod{pod("a", "", v1.PodPending), pod("b", "", v1.PodPending)}, "Normal WaitForPodScheduled waiting for pods "},
	} {
		t.Run(name, func(t *testing.T) {
			api := newAPIServer(makeClass("wffc", "example.com/p", storagev1.VolumeBindingWaitForFirstConsumer, false), makeClaim("c", "1Gi", claimClassOpt("wffc")))
			for _, p := range tc.pods {
				if _, err := api.CoreV1().Pods(testNS).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			f := newFixture(t, api)
			f.settle()
			if ev := strings.Join(f.events(), "\n"); !strings.Contains(ev, tc.want) {
				t.Errorf("events %q, want %q", ev, tc.want)
			}
		})
	}
}

// Ephemeral volumes' claims are found too (upstream's index).
func TestPodClaimKeys(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "p"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "a", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}},
		{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
	}}}
	keys, _ := podClaimKeys(pod)
	if !slices.Equal(keys, []string{"n/data", "n/p-scratch"}) {
		t.Errorf("keys %v", keys)
	}
}
