package quota

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The resource types with usage beyond a plain object count.
var (
	podsResource     = schema.GroupResource{Resource: "pods"}
	servicesResource = schema.GroupResource{Resource: "services"}
	pvcsResource     = schema.GroupResource{Resource: "persistentvolumeclaims"}
	claimsResource   = schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}
)

// countPrefix starts the name of an object-count quota: count/<resource>[.<group>].
const countPrefix = "count/"

// legacyCounts are the object counts quota had before count/<resource> existed; they mean the
// same as count/<resource>. (pods, services and persistentvolumeclaims have their own
// evaluators, whose legacy names mean something else than a plain count.)
var legacyCounts = map[v1.ResourceName]schema.GroupResource{
	v1.ResourceConfigMaps:             {Resource: "configmaps"},
	v1.ResourceSecrets:                {Resource: "secrets"},
	v1.ResourceQuotas:                 {Resource: "resourcequotas"},
	v1.ResourceReplicationControllers: {Resource: "replicationcontrollers"},
}

// coreVersions are the versions of the resource types every apiserver serves, so that they
// are counted even while discovery fails.
var coreVersions = map[schema.GroupResource]string{
	podsResource:                         "v1",
	servicesResource:                     "v1",
	pvcsResource:                         "v1",
	{Resource: "configmaps"}:             "v1",
	{Resource: "secrets"}:                "v1",
	{Resource: "resourcequotas"}:         "v1",
	{Resource: "replicationcontrollers"}: "v1",
}

// countName is the object-count quota name of gr, as the apiserver's admission spells it.
func countName(gr schema.GroupResource) v1.ResourceName {
	if gr.Group == "" {
		return v1.ResourceName(countPrefix + gr.Resource)
	}
	return v1.ResourceName(countPrefix + gr.Resource + "." + gr.Group)
}

// parseCountName returns the resource type an object-count name counts. The resource is
// everything up to the first dot: resource names have none, group names do.
func parseCountName(name v1.ResourceName) (schema.GroupResource, bool) {
	rest, ok := strings.CutPrefix(string(name), countPrefix)
	if !ok || rest == "" {
		return schema.GroupResource{}, false
	}
	resource, group, _ := strings.Cut(rest, ".")
	if resource == "" {
		return schema.GroupResource{}, false
	}
	return schema.GroupResource{Group: group, Resource: resource}, true
}

// ignoredResources are the types upstream's quota never counts: virtual ones that are never
// stored, and Events (never quota-ed, so that writing an Event costs no quota check). A
// count/ name of one of them is left alone like a name no evaluator measures: no usage, no
// warning, no rediscovery.
var ignoredResources = map[schema.GroupResource]bool{
	{Resource: "bindings"}:                                                 true,
	{Resource: "componentstatuses"}:                                        true,
	{Group: "authentication.k8s.io", Resource: "tokenreviews"}:             true,
	{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}:       true,
	{Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}:      true,
	{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}:  true,
	{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"}: true,
	{Group: "authorization.k8s.io", Resource: "selfsubjectrulesreviews"}:   true,
	{Resource: "events"}:                         true,
	{Group: "events.k8s.io", Resource: "events"}: true,
}

// quotableVerbs are what a type must support to be counted, as upstream requires.
var quotableVerbs = []string{"create", "list", "watch", "delete"}

// quotable reports whether discovery's resource r of group is a type quota counts: a
// namespaced top-level resource (no subresource) with every verb of quotableVerbs, not ignored.
func quotable(group string, r metav1.APIResource) bool {
	if strings.Contains(r.Name, "/") || ignoredResources[schema.GroupResource{Group: group, Resource: r.Name}] {
		return false
	}
	for _, v := range quotableVerbs {
		if !slices.Contains(r.Verbs, v) {
			return false
		}
	}
	return true
}

// resourceFor returns the resource type whose objects make up the usage of name, or false
// when no evaluator measures name (a typo, an ignored type, or a resource quota does not
// know). The usage of such names is left as it is, as upstream does. An extended resource
// that DRA devices also provide is measured from claims too (resourcesFor).
func resourceFor(name v1.ResourceName, o ClaimOptions) (schema.GroupResource, bool) {
	switch {
	case podTracks(name):
		return podsResource, true
	case serviceTracks(name):
		return servicesResource, true
	case pvcTracks(name):
		return pvcsResource, true
	case claimTracks(name, o):
		return claimsResource, true
	}
	if gr, ok := legacyCounts[name]; ok {
		return gr, true
	}
	gr, ok := parseCountName(name)
	if ok && ignoredResources[gr] {
		return schema.GroupResource{}, false
	}
	return gr, ok
}

// resourcesFor returns every resource type whose objects make up the usage of name: usage
// is their sum.
func resourcesFor(name v1.ResourceName, o ClaimOptions) []schema.GroupResource {
	gr, ok := resourceFor(name, o)
	if !ok {
		return nil
	}
	if gr == podsResource && claimSharesWithPods(name, o) {
		return []schema.GroupResource{podsResource, claimsResource}
	}
	return []schema.GroupResource{gr}
}

// namesByResource groups the names of a quota's hard limits by the resource types that measure them.
func namesByResource(hard v1.ResourceList, o ClaimOptions) map[schema.GroupResource][]v1.ResourceName {
	out := map[schema.GroupResource][]v1.ResourceName{}
	for name := range hard {
		for _, gr := range resourcesFor(name, o) {
			out[gr] = append(out[gr], name)
		}
	}
	return out
}

// tracksResource reports whether any of the quota's hard limits is measured from gr.
func tracksResource(hard v1.ResourceList, gr schema.GroupResource, o ClaimOptions) bool {
	for name := range hard {
		if slices.Contains(resourcesFor(name, o), gr) {
			return true
		}
	}
	return false
}
