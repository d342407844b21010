// Package nodepods is what the node lifecycle and taint eviction controllers share about the
// Pods bound to a Node: both find a Node's Pods through the same index of the shared Pod
// informer, key Pods the same way, and write Pod status conditions pinned to the Pod's UID.
package nodepods

import (
	"encoding/json"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// nodeNameIndex indexes Pods by spec.nodeName.
const nodeNameIndex = "spec.nodeName"

// AddIndex adds the spec.nodeName index to the Pod informer and returns its indexer. Both
// controllers of the binary call it on the one shared informer: the second finds the index in
// place, which is no error.
func AddIndex(pods cache.SharedIndexInformer) (cache.Indexer, error) {
	if err := pods.AddIndexers(cache.Indexers{nodeNameIndex: byNodeName}); err != nil {
		if _, exists := pods.GetIndexer().GetIndexers()[nodeNameIndex]; !exists {
			return pods.GetIndexer(), err
		}
	}
	return pods.GetIndexer(), nil
}

func byNodeName(obj any) ([]string, error) {
	pod, ok := obj.(*v1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{pod.Spec.NodeName}, nil
}

// OnNode returns the cached Pods bound to the named Node, from an indexer AddIndex returned.
func OnNode(pods cache.Indexer, node string) ([]*v1.Pod, error) {
	objs, err := pods.ByIndex(nodeNameIndex, node)
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		if pod, ok := o.(*v1.Pod); ok && pod.Spec.NodeName == node {
			out = append(out, pod)
		}
	}
	return out, nil
}

// Key is the namespace/name key of pod in the controllers' queues.
func Key(pod *v1.Pod) string { return pod.Namespace + "/" + pod.Name }

// StatusPatch is a strategic merge patch of a Pod's status conditions (merged by type),
// pinned to the Pod's UID so that a Pod recreated under the same name is never touched.
func StatusPatch(uid types.UID, conds ...v1.PodCondition) ([]byte, error) {
	return json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": uid},
		"status":   map[string]any{"conditions": conds},
	})
}
