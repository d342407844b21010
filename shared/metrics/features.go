package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/component-base/featuregate"
)

// RegisterFeatureGates exports upstream's kubernetes_feature_enabled{name,stage} for the gates
// that act on this binary (1 enabled, 0 not); the gates are fixed for the process's life.
func RegisterFeatureGates(reg prometheus.Registerer, gates featuregate.FeatureGate, acting []featuregate.Feature) {
	if len(acting) == 0 {
		return
	}
	g := Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubernetes_feature_enabled",
		Help: "Whether a feature gate that acts on this controller is enabled (1) or not (0), with its stage.",
	}, []string{"name", "stage"}))
	all := gates.DeepCopy().GetAll()
	for _, name := range acting {
		v := 0.0
		if gates.Enabled(name) {
			v = 1
		}
		g.WithLabelValues(string(name), string(all[name].PreRelease)).Set(v)
	}
}
