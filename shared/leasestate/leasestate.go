// Package leasestate keeps a little state of a Lease holder in the cluster for the next holder:
// one ConfigMap named <Lease name><suffix>, in the Lease's namespace, with one data key.
//
// A ConfigMap rather than an annotation on the Lease: the Lease is rewritten by every renewal,
// and a write of ours there would make renewals conflict. Only the holder writes it: the caller
// passes its fenced client (shared/leader), so a process that lost its Lease cannot write, and
// every update is conditioned on the resourceVersion this Store last read or wrote, so a write
// made by anybody else in between is never overwritten blindly.
//
// The Store only moves bytes. What they mean, whether they are fresh, and what the next holder
// may believe of them is the caller's: content that cannot be read or is stale must never be a
// permission to delete, release or evict.
package leasestate

import (
	"context"
	"errors"
	"fmt"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// DefaultMaxBytes bounds the stored value unless Options say otherwise (the apiserver takes
// 1 MiB per object at most).
const DefaultMaxBytes = 256 << 10

// ManagedByLabel is set on the ConfigMap, to the Options' ManagedBy.
const ManagedByLabel = "app.kubernetes.io/managed-by"

var (
	// ErrNotLoaded: Save before a successful Load. A holder that could not read the state
	// never overwrites what its predecessor kept.
	ErrNotLoaded = errors.New("lease state not read yet")
	// ErrChanged: the ConfigMap was changed, created or deleted by another writer since it
	// was last read. The Store is unloaded: Load again, then decide what to save.
	ErrChanged = errors.New("lease state changed by another writer")
	// ErrTooLarge: the value is over the Store's bound; nothing was written.
	ErrTooLarge = errors.New("lease state over its size bound")
)

// Name is the ConfigMap's name for a Lease and a suffix ("-discovery").
func Name(leaseName, suffix string) string { return leaseName + suffix }

// Options configure a Store.
type Options struct {
	// Key is the ConfigMap's one data key (required).
	Key string
	// MaxBytes bounds the value (0: DefaultMaxBytes).
	MaxBytes int
	// ManagedBy is the ManagedByLabel value of a ConfigMap the Store creates (optional).
	ManagedBy string
}

// Store reads and writes one ConfigMap. Its methods may be called from several goroutines;
// they are serialized.
type Store struct {
	client corev1client.ConfigMapInterface
	name   string
	opts   Options

	mu sync.Mutex
	// loaded: read (or found absent) since the Store was made or last unloaded.
	loaded bool
	// cm is the ConfigMap as last read or written; nil: absent.
	cm *v1.ConfigMap
}

// New returns a Store of ConfigMap name in cms (the Lease's namespace, through the fenced
// client). It reads nothing yet.
func New(cms corev1client.ConfigMapInterface, name string, opts Options) (*Store, error) {
	if cms == nil || name == "" || opts.Key == "" {
		return nil, fmt.Errorf("leasestate: a client, a name and a key are required (name %q, key %q)", name, opts.Key)
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	return &Store{client: cms, name: name, opts: opts}, nil
}

// Name is the ConfigMap's name.
func (s *Store) Name() string { return s.name }

// MaxBytes is the bound on a value.
func (s *Store) MaxBytes() int { return s.opts.MaxBytes }

// Loaded reports whether the state was read (or found absent) and not changed by another
// writer since: Save is allowed.
func (s *Store) Loaded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded
}

// ResourceVersion is that of the ConfigMap as last read or written ("": absent or unread).
func (s *Store) ResourceVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cm == nil {
		return ""
	}
	return s.cm.ResourceVersion
}

// Load reads the ConfigMap and returns the value under the key: found is false when the
// ConfigMap is absent or has no such key. A failed read returns the error and leaves the Store
// unloaded; a successful one (absent included) loads it.
func (s *Store) Load(ctx context.Context) (value []byte, found bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cm, err := s.client.Get(ctx, s.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s.cm, s.loaded = nil, true
		return nil, false, nil
	case err != nil:
		s.loaded = false
		return nil, false, fmt.Errorf("reading lease state ConfigMap %s: %w", s.name, err)
	}
	s.cm, s.loaded = cm, true
	v, ok := cm.Data[s.opts.Key]
	if !ok {
		return nil, false, nil
	}
	return []byte(v), true, nil
}

// Save writes value under the key: it creates the ConfigMap if the last Load found it absent,
// and otherwise updates it conditioned on the resourceVersion last read or written. Other data
// keys of the ConfigMap are dropped. Errors: ErrNotLoaded, ErrTooLarge, ErrChanged (wrapped
// with the apiserver's error; the Store is unloaded), or the write's own error (a fenced
// write included: shared/leader.IsFenced).
func (s *Store) Save(ctx context.Context, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loaded {
		return fmt.Errorf("writing lease state ConfigMap %s: %w", s.name, ErrNotLoaded)
	}
	if len(value) > s.opts.MaxBytes {
		return fmt.Errorf("writing lease state ConfigMap %s: %d bytes, bound %d: %w", s.name, len(value), s.opts.MaxBytes, ErrTooLarge)
	}
	data := map[string]string{s.opts.Key: string(value)}
	var out *v1.ConfigMap
	var err error
	if s.cm == nil {
		cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: s.name}, Data: data}
		if s.opts.ManagedBy != "" {
			cm.Labels = map[string]string{ManagedByLabel: s.opts.ManagedBy}
		}
		out, err = s.client.Create(ctx, cm, metav1.CreateOptions{})
	} else {
		cm := s.cm.DeepCopy()
		cm.Data = data
		cm.BinaryData = nil
		out, err = s.client.Update(ctx, cm, metav1.UpdateOptions{})
	}
	switch {
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err):
		s.loaded = false
		return fmt.Errorf("writing lease state ConfigMap %s: %w (%w)", s.name, ErrChanged, err)
	case err != nil:
		return fmt.Errorf("writing lease state ConfigMap %s: %w", s.name, err)
	}
	s.cm = out
	return nil
}

// Unload forgets what was read: the next Save needs a Load first (a new term begins).
func (s *Store) Unload() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loaded, s.cm = false, nil
}
