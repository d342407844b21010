package sharding

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// RawProbe is a probe (WithProbe) for a resource whose informer lists metadata only: it lists
// gvr as full objects, in JSON, and keeps only the list's metadata. rc is any REST client of
// the apiserver (e.g. a clientset's Discovery().RESTClient()); the request's path is absolute,
// so the client's own group and version do not matter. The probe asks for at most one object,
// so reading it whole costs one object.
func RawProbe(rc rest.Interface, gvr schema.GroupVersionResource) ListFunc {
	path := "/apis/" + gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
	if gvr.Group == "" {
		path = "/api/" + gvr.Version + "/" + gvr.Resource
	}
	return func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		body, err := rc.Get().AbsPath(path).
			SetHeader("Accept", "application/json").
			SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion).
			Do(ctx).Raw()
		if err != nil {
			return nil, err
		}
		var list struct {
			Metadata metav1.ListMeta `json:"metadata"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, fmt.Errorf("probing %s: %w", gvr, err)
		}
		return &metav1.List{ListMeta: list.Metadata}, nil
	}
}
