package nodepods

import (
	"encoding/json"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// Both controllers add the index to the one shared informer: the second finds it in place;
// OnNode returns only the Pods bound to the Node asked for.
func TestAddIndexTwiceAndOnNode(t *testing.T) {
	inf := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().Pods().Informer()
	first, err := AddIndex(inf)
	if err != nil {
		t.Fatal(err)
	}
	second, err := AddIndex(inf)
	if err != nil || second != first {
		t.Fatalf("second AddIndex = %v, %v; want the same indexer, no error", second, err)
	}
	pod := func(name, node string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: v1.PodSpec{NodeName: node}}
	}
	for _, p := range []*v1.Pod{pod("a", "n1"), pod("b", "n2"), pod("pending", "")} {
		if err := first.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := OnNode(first, "n1")
	if err != nil || len(got) != 1 || Key(got[0]) != "ns/a" {
		t.Errorf("OnNode(n1) = %v, %v; want ns/a", got, err)
	}
}

// The status patch carries the UID, so the apiserver refuses it for a Pod recreated under
// the same name.
func TestStatusPatchPinsUID(t *testing.T) {
	data, err := StatusPatch("u1", v1.PodCondition{Type: v1.PodReady, Status: v1.ConditionFalse})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata struct{ UID string } `json:"metadata"`
		Status   v1.PodStatus         `json:"status"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Metadata.UID != "u1" || len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != v1.PodReady {
		t.Errorf("patch = %s", data)
	}
}
