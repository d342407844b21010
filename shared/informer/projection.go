package informer

import "k8s.io/client-go/tools/cache"

// Projection is one type's part of a Transform: it reports whether obj is of its type and, if
// so, returns what the cache keeps of it.
type Projection func(obj any) (projected any, ok bool)

// Project returns the Projection that hands every *T to keep.
func Project[T any](keep func(*T) *T) Projection {
	return func(obj any) (any, bool) {
		if o, ok := obj.(*T); ok {
			return keep(o), true
		}
		return nil, false
	}
}

// Transform returns an informer transform that gives each object to the first projection of
// its type and takes only managedFields off objects of any other type. The projections stay
// with each controller: a binary's cache keeps only the fields that binary reads, so two
// binaries may keep different parts of the same type.
func Transform(projections ...Projection) cache.TransformFunc {
	return func(obj any) (any, error) {
		for _, p := range projections {
			if out, ok := p(obj); ok {
				return out, nil
			}
		}
		return DropManagedFields(obj)
	}
}
