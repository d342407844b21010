package benchkit

import (
	"encoding/json"
	"runtime"
)

// CacheBytes returns the heap bytes one cached object costs: n copies of proto, each decoded
// afresh from JSON (so that, as objects listed from the apiserver, none shares a string with
// another), passed through transform (nil keeps them whole) and held as an informer's store
// holds them. The untransformed copies are garbage by the time the heap is read. newObj
// returns an empty object of proto's type to decode into.
func CacheBytes[T any](n int, proto T, newObj func() T, transform func(any) (any, error)) (float64, error) {
	raw, err := json.Marshal(proto)
	if err != nil {
		return 0, err
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	store := make([]any, n)
	for i := range store {
		obj := newObj()
		if err := json.Unmarshal(raw, obj); err != nil {
			return 0, err
		}
		var kept any = obj
		if transform != nil {
			if kept, err = transform(obj); err != nil {
				return 0, err
			}
		}
		store[i] = kept
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(store)
	// The slice of interfaces itself is the store's index, not the object: leave it out.
	slice := float64(n * 16)
	return (float64(after.HeapAlloc) - float64(before.HeapAlloc) - slice) / float64(n), nil
}
