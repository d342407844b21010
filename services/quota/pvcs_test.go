package quota

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestPVCUsage(t *testing.T) {
	claim := func(mut ...func(*v1.PersistentVolumeClaim)) *v1.PersistentVolumeClaim {
		c := &v1.PersistentVolumeClaim{Spec: v1.PersistentVolumeClaimSpec{Resources: v1.VolumeResourceRequirements{Requests: rl("storage", "10Gi")}}}
		for _, m := range mut {
			m(c)
		}
		return c
	}
	gold := func(c *v1.PersistentVolumeClaim) { c.Spec.StorageClassName = new("gold") }
	tests := []struct {
		name string
		pvc  *v1.PersistentVolumeClaim
		want map[string]string
	}{
		{"no class", claim(), map[string]string{"persistentvolumeclaims": "1", "count/persistentvolumeclaims": "1", "requests.storage": "10Gi", "gold.storageclass.storage.k8s.io/requests.storage": "-"}},
		{"class field", claim(gold), map[string]string{"gold.storageclass.storage.k8s.io/requests.storage": "10Gi", "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "1"}},
		{"beta annotation wins", claim(gold, func(c *v1.PersistentVolumeClaim) {
			c.Annotations = map[string]string{v1.BetaStorageClassAnnotation: "silver"}
		}), map[string]string{"silver.storageclass.storage.k8s.io/requests.storage": "10Gi", "gold.storageclass.storage.k8s.io/requests.storage": "-"}},
		{"fractional bytes round up", claim(func(c *v1.PersistentVolumeClaim) { c.Spec.Resources.Requests = rl("storage", "1500m") }), map[string]string{"requests.storage": "2"}},
		{"larger allocation counts", claim(func(c *v1.PersistentVolumeClaim) { c.Status.AllocatedResources = rl("storage", "20Gi") }), map[string]string{"requests.storage": "20Gi"}},
		{"smaller allocation does not", claim(func(c *v1.PersistentVolumeClaim) { c.Status.AllocatedResources = rl("storage", "5Gi") }), map[string]string{"requests.storage": "10Gi"}},
		{"no request", claim(func(c *v1.PersistentVolumeClaim) { c.Spec.Resources.Requests = nil }), map[string]string{"persistentvolumeclaims": "1", "requests.storage": "-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkUsage(t, pvcUsage(tt.pvc), tt.want) })
	}
	vac := func(c *v1.PersistentVolumeClaim) { c.Spec.VolumeAttributesClassName = new("fast") }
	in := v1.ScopedResourceSelectorRequirement{ScopeName: v1.ResourceQuotaScopeVolumeAttributesClass, Operator: v1.ScopeSelectorOpIn, Values: []string{"fast"}}
	if !pvcMatchesScope(in, claim(vac)) || pvcMatchesScope(in, claim()) {
		t.Error("VolumeAttributesClass In")
	}
	if !pvcUsageChanged(claim(), claim(func(c *v1.PersistentVolumeClaim) { c.Status.AllocatedResources = rl("storage", "20Gi") })) {
		t.Error("an expansion must replenish")
	}
}
