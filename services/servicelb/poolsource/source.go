// Package poolsource reads address pools from the pool APIs --pool-api names, one file per
// API (kcmsplit.go, metallb.go): how its pools are keyed and parsed into the Pools allocation
// works from, what a Service asks of it by annotation, and how a pool's status is written.
// A third API is a third file and one entry in APIs.
package poolsource

import (
	"context"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
)

// Source is one pool API as the controller runs it: it parses what the API's informer
// caches and writes a pool's status. Everything else about the API is data (API).
type Source interface {
	// API says what the source is.
	API() API
	// Namespace is where its pools are read; "" for cluster-scoped pools.
	Namespace() string
	// Transform trims an object before it enters the source's informer cache.
	Transform(obj any) (any, error)
	// Parse parses one object of the source's informer cache.
	Parse(obj any) (Parsed, error)
	// WriteStatus writes the status of cur (an object of the cache) as p and stats say,
	// when it differs; the object's resourceVersion guards against lost updates.
	WriteStatus(ctx context.Context, cur any, p *Pool, stats addrpool.Stats) error
}

// API is what is fixed about one pool API: its name and resource, how its pools are keyed
// here, and which Service annotations name its pools, request addresses and share them.
type API struct {
	// Name is what --pool-api takes and the api label of the metrics.
	Name string
	// Resource is the pools' resource, asked of discovery and watched.
	Resource schema.GroupVersionResource
	// KeyPrefix starts the key of every pool of this API (empty for one API at most): pool
	// keys of two APIs never collide.
	KeyPrefix string
	// OnePool: all of a Service's addresses come from one pool of this API (MetalLB's
	// speaker announces a Service only when all its addresses are in one of its pools).
	OnePool bool
	// PoolAnnotations name a pool, IPsAnnotations request addresses, SharingAnnotations
	// give the sharing key: of each list the first annotation present counts (present and
	// empty included), so a current name wins over a legacy one.
	PoolAnnotations, IPsAnnotations, SharingAnnotations []string
	// IPsExcludeSpecIP refuses a Service setting both an IPs annotation and
	// spec.loadBalancerIP.
	IPsExcludeSpecIP bool
	// Title names the API in logs; Install says how to get it served.
	Title, Install string
}

// APIs are the pool APIs known, in the order a Service's sharing key is read.
var APIs = []API{KCMSplit, MetalLB}

// Key is the key here of the pool of this API named name.
func (a API) Key(name string) string { return a.KeyPrefix + name }

// APIOf returns the API a pool key belongs to and the pool's object name.
func APIOf(key string) (API, string) {
	var unprefixed API
	for _, a := range APIs {
		if a.KeyPrefix == "" {
			unprefixed = a
			continue
		}
		if name, ok := strings.CutPrefix(key, a.KeyPrefix); ok {
			return a, name
		}
	}
	return unprefixed, key
}

// Labels splits a pool key into the api and pool labels of the metrics.
func Labels(key string) (api, pool string) {
	a, name := APIOf(key)
	return a.Name, name
}

// Annotation returns the value of the first of names present on svc (present and empty
// counts, as in MetalLB), and that name.
func Annotation(svc *v1.Service, names []string) (value, name string, ok bool) {
	for _, n := range names {
		if v, ok := svc.Annotations[n]; ok {
			return v, n, true
		}
	}
	return "", "", false
}

// SharingKey is svc's sharing key: the first API's (in APIs) that the Service sets. Read
// whatever --pool-api says, so an address shared under one API stays shared when another
// is enabled too.
func SharingKey(svc *v1.Service) string {
	for _, a := range APIs {
		if v, _, _ := Annotation(svc, a.SharingAnnotations); strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
