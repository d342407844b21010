// Package foreign notices another controller writing the objects a kcm-split controller owns,
// typically kube-controller-manager still running the same controller after a botched switch,
// and says so once per episode: an Event on the object, one log line and the counter
// kcm_split_foreign_writer_detected_total{controller}. It only observes: it never writes the
// object and never changes what the controller writes, so the no-write-war rule holds.
//
// The writer is named by the object's managedFields: the API server records, per field manager
// (the first word of a client's user agent unless the request names one), the fields its
// updates and applies last changed and when. A foreign write is an entry of a manager that is
// neither ours nor ignored, overlapping the fields the controller owns, whose time moved.
// Informers here drop managedFields before caching (they are a large share of a cache), so the
// Detector reads them in the informer transform, before they are dropped (Observe).
//
// No library serves this: client-go and controller-runtime expose managedFields but keep no
// per-writer episode of them.
package foreign

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// Reason is the reason of the Event a detection records on the object.
const Reason = "ForeignWriterDetected"

// Defaults of Options.
const (
	// DefaultQuietPeriod ends an episode: a manager not seen writing for this long is reported
	// again when it next writes. Long enough that a KCM left running (it rewrites on every
	// input change and resync) stays one episode, short enough that a second mistake on the
	// same day is a second report.
	DefaultQuietPeriod = 10 * time.Minute
	// DefaultMaxObjects bounds the objects whose last foreign write times are remembered.
	DefaultMaxObjects = 4096
	// DefaultMaxEpisodes bounds the (controller, manager) episodes remembered.
	DefaultMaxEpisodes = 64
)

// IgnoredManagers returns the field managers that write controllers' fields by design and are
// never a second owner: the API server itself (quota admission charges ResourceQuota
// status.used on every admitted create through its loopback client, whose user agent starts
// with the binary's name) and the placeholder manager server-side apply gives fields that
// predate the first apply.
func IgnoredManagers() []string { return []string{"kube-apiserver", "before-first-apply"} }

// Options configure a Detector.
type Options struct {
	// Ours are the field managers of this binary: every replica and every term of it writes
	// with the same one (kube.UserAgent starts with the controller ID), so none of them counts.
	Ours []string
	// Ignored are managers that are never reported; nil means IgnoredManagers().
	Ignored []string
	// QuietPeriod ends an episode; 0 means DefaultQuietPeriod.
	QuietPeriod time.Duration
	// MaxObjects and MaxEpisodes bound the memory; 0 means the defaults.
	MaxObjects, MaxEpisodes int
	// Registerer receives kcm_split_foreign_writer_detected_total (nil: not registered): the
	// process's registry, where Register made its series at the process's start, so that a
	// term's first episode is an increase from a 0 already scraped.
	Registerer prometheus.Registerer
	// Logger receives one line per episode.
	Logger logr.Logger
	// Now is the clock (nil: time.Now); tests move it.
	Now func() time.Time
}

// Target is one controller's claim on one kind of object: which of its objects are its own
// and which of their fields it writes.
type Target struct {
	// Controller is the metric label and the log key: upstream's name of the controller (its
	// package's Name), as in the reconcile metrics.
	Controller string
	// Owns, when set, tells whether an object is one the controller writes (an Endpoints of a
	// Service with a selector, a slice with its managed-by label). It sees the object as the
	// API server sent it.
	Owns func(obj metav1.Object) bool
	// Fields are the field paths the controller writes, e.g. {"status", "used"}; a manager
	// whose fields include one of them, a field inside one or a whole atomic ancestor of one,
	// wrote the controller's fields.
	Fields [][]string
	// Recorder records the Event on the object.
	Recorder record.EventRecorder
}

// Detector notices foreign writes and keeps the episodes. It is safe for concurrent use.
type Detector struct {
	ours, ignored map[string]bool
	quiet         time.Duration
	maxObjects    int
	maxEpisodes   int
	log           logr.Logger
	now           func() time.Time
	detected      *prometheus.CounterVec
	// start excludes history: entries older than the first object the Detector looks at (for
	// example KCM's, from before the switch) were written before this term's controllers ran.
	// It is taken then, not in New: a term built while the controllers still wait (for the
	// take-over's proof, or the migration Lease) would otherwise count every write the other
	// owner made during the wait, reporting a planned switch as a second writer.
	startOnce sync.Once
	start     time.Time

	mu sync.Mutex
	// seen holds, per object, the time of each foreign entry already looked at, only for
	// objects with a foreign entry newer than start: usually none.
	seen map[types.UID]map[entryKey]time.Time
	// episodes holds, per (controller, manager), when its episode began and when it was last
	// seen writing.
	episodes map[episodeKey]episode
	// tracked are the controllers of the Targets tracked (Track): kept episodes of others are
	// not taken over.
	tracked map[string]bool
	// changed is signalled when an episode begins or is taken over (keep.go writes it out).
	changed chan struct{}
}

type episode struct {
	start, last time.Time
}

type entryKey struct {
	manager, operation, subresource string
}

type episodeKey struct {
	controller, manager string
}

// New returns a Detector and registers its counter.
func New(o Options) *Detector {
	ignored := o.Ignored
	if ignored == nil {
		ignored = IgnoredManagers()
	}
	d := &Detector{
		ours:        set(o.Ours),
		ignored:     set(ignored),
		quiet:       orDefault(o.QuietPeriod, DefaultQuietPeriod),
		maxObjects:  orDefault(o.MaxObjects, DefaultMaxObjects),
		maxEpisodes: orDefault(o.MaxEpisodes, DefaultMaxEpisodes),
		log:         o.Logger,
		now:         o.Now,
		seen:        map[types.UID]map[entryKey]time.Time{},
		episodes:    map[episodeKey]episode{},
		tracked:     map[string]bool{},
		changed:     make(chan struct{}, 1),
		detected:    counter(o.Registerer),
	}
	if d.now == nil {
		d.now = time.Now
	}
	return d
}

// counter is kcm_split_foreign_writer_detected_total, registered on reg (the one already there
// if it is).
func counter(reg prometheus.Registerer) *prometheus.CounterVec {
	return metrics.With(reg).NewCounterVec(prometheus.CounterOpts{
		Name: "kcm_split_foreign_writer_detected_total",
		Help: "Episodes in which another field manager (e.g. kube-controller-manager still running this controller) wrote fields this controller owns.",
	}, []string{"controller"})
}

// Register makes kcm_split_foreign_writer_detected_total's series of each controller (a
// Target's Controller) at 0 on reg. Call it when the process starts (app.Spec.ProcessMetrics),
// with every controller the process may track, and give the Detectors the same registry: a
// series born in a term at its first episode would be first scraped at 1, and an increase()
// over it reads 0, so the first episode would never alert.
func Register(reg prometheus.Registerer, controllers ...string) {
	c := counter(reg)
	for _, name := range controllers {
		c.WithLabelValues(name)
	}
}

func set(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Track returns t after starting its series of the counter at 0: a rate or increase over it
// then sees the first episode, and a dashboard tells "none" from "not running".
func (d *Detector) Track(t *Target) *Target {
	d.detected.WithLabelValues(t.Controller)
	d.mu.Lock()
	d.tracked[t.Controller] = true
	d.mu.Unlock()
	return t
}

// Write is one foreign write found on an object.
type Write struct {
	Manager     string
	Operation   metav1.ManagedFieldsOperationType
	Subresource string
	At          time.Time
}

// Observe looks at obj, an object of t's kind as the API server sent it (managedFields
// included), and reports each foreign write on it not seen before. Call it from the
// informer's transform, before managedFields are dropped. It returns the writes found (for
// tests); the reports are made already.
func (d *Detector) Observe(t *Target, obj any) []Write {
	// managedFields times have whole seconds: an entry of start's own second counts.
	d.startOnce.Do(func() { d.start = d.now().Truncate(time.Second) })
	m, err := meta.Accessor(obj)
	if err != nil || len(m.GetManagedFields()) == 0 {
		return nil
	}
	ro, _ := obj.(runtime.Object)
	if t.Owns != nil && !t.Owns(m) {
		return nil
	}
	var found []Write
	for _, e := range m.GetManagedFields() {
		if d.ours[e.Manager] || d.ignored[e.Manager] || e.Time == nil || e.Time.Time.Before(d.start) {
			continue
		}
		if !touches(e.FieldsV1, t.Fields) {
			continue
		}
		if d.remember(m.GetUID(), entryKey{e.Manager, string(e.Operation), e.Subresource}, e.Time.Time) {
			found = append(found, Write{Manager: e.Manager, Operation: e.Operation, Subresource: e.Subresource, At: e.Time.Time})
		}
	}
	for _, w := range found {
		d.report(t, m, ro, w)
	}
	return found
}

// ObserveChange is Observe for fields whose managedFields entries say too little by
// themselves: a manager's entry keeps every field it ever set and its time moves on any of
// its writes, so an entry that owns a field the controller writes does not say that its
// last write changed it (an object's creator owns the fields it created it with; a Node's
// taints are one atomic list, owned whole by whoever last wrote any taint). The caller saw
// the values at changed paths differ from the object's previous version (the informer's
// cache, in the transform); with updates the writer of a field becomes its owner, so the
// managers owning a changed field now made the change. Each foreign one, seen writing since
// the Detector started, is reported (episodes as Observe). Paths name fields as
// Target.Fields does; an element starting with "k:" is a list item's key as managedFields
// spell it, e.g. {"status", "conditions", `k:{"type":"Ready"}`, "status"}.
func (d *Detector) ObserveChange(t *Target, obj any, changed [][]string) []Write {
	d.startOnce.Do(func() { d.start = d.now().Truncate(time.Second) })
	m, err := meta.Accessor(obj)
	if err != nil || len(changed) == 0 || (t.Owns != nil && !t.Owns(m)) {
		return nil
	}
	ro, _ := obj.(runtime.Object)
	var found []Write
	for _, e := range m.GetManagedFields() {
		if d.ours[e.Manager] || d.ignored[e.Manager] || e.Time == nil || e.Time.Time.Before(d.start) {
			continue
		}
		if touches(e.FieldsV1, changed) {
			found = append(found, Write{Manager: e.Manager, Operation: e.Operation, Subresource: e.Subresource, At: e.Time.Time})
		}
	}
	for _, w := range found {
		d.report(t, m, ro, w)
	}
	return found
}

// Report reports a foreign write found by other means than managedFields, with the same
// episodes as Observe: a write that leaves no trace there, such as a namespace's finalize by
// another writer, which deletes the namespace in the same request. obj is the object as last
// seen.
func (d *Detector) Report(t *Target, obj any, w Write) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	ro, _ := obj.(runtime.Object)
	d.report(t, m, ro, w)
}

// remember records the entry's time and reports whether it moved (a write not seen before).
func (d *Detector) remember(uid types.UID, k entryKey, at time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	entries, ok := d.seen[uid]
	if !ok {
		if len(d.seen) >= d.maxObjects {
			// Any one: forgetting an object costs at most one more detection, which an
			// episode in progress absorbs.
			for u := range d.seen {
				delete(d.seen, u)
				break
			}
		}
		entries = map[entryKey]time.Time{}
		d.seen[uid] = entries
	}
	if prev, ok := entries[k]; ok && prev.Equal(at) {
		return false
	}
	entries[k] = at
	return true
}

// Forget drops what is remembered of a deleted object; obj may be a tombstone.
func (d *Detector) Forget(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	d.mu.Lock()
	delete(d.seen, m.GetUID())
	d.mu.Unlock()
}

// DeleteHandler is an informer handler that forgets deleted objects.
func (d *Detector) DeleteHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{DeleteFunc: d.Forget}
}

// report starts an episode for (t.Controller, w.Manager), or extends the one in progress.
func (d *Detector) report(t *Target, m metav1.Object, ro runtime.Object, w Write) {
	now := d.now()
	k := episodeKey{t.Controller, w.Manager}
	d.mu.Lock()
	e, inEpisode := d.episodes[k]
	inEpisode = inEpisode && now.Sub(e.last) < d.quiet
	if !inEpisode {
		if len(d.episodes) >= d.maxEpisodes {
			d.evictEpisodeLocked(now)
		}
		e.start = now
	}
	e.last = now
	d.episodes[k] = e
	d.mu.Unlock()
	if inEpisode {
		return
	}
	d.signal()
	d.detected.WithLabelValues(t.Controller).Inc()
	d.log.Info("Foreign writer detected: another field manager wrote fields this controller owns; not fighting it",
		"controller", t.Controller, "manager", w.Manager, "operation", w.Operation, "subresource", w.Subresource,
		"object", klog.KObj(m), "at", w.At.UTC().Format(time.RFC3339), "quietPeriod", d.quiet)
	if t.Recorder != nil && ro != nil {
		t.Recorder.Eventf(ro, corev1.EventTypeWarning, Reason,
			"Field manager %q wrote the fields %s owns at %s (%s%s): two controllers may be running it (kube-controller-manager not switched off?). Not fighting it; reported once until it has been quiet for %s.",
			w.Manager, t.Controller, w.At.UTC().Format(time.RFC3339), w.Operation, subresource(w.Subresource), d.quiet)
	}
}

func subresource(s string) string {
	if s == "" {
		return ""
	}
	return " of " + s
}

// evictEpisodeLocked makes room: ended episodes first, else the one quiet the longest.
func (d *Detector) evictEpisodeLocked(now time.Time) {
	var oldest episodeKey
	var oldestAt time.Time
	first := true
	for k, e := range d.episodes {
		at := e.last
		if now.Sub(at) >= d.quiet {
			delete(d.episodes, k)
			continue
		}
		if first || at.Before(oldestAt) {
			oldest, oldestAt, first = k, at, false
		}
	}
	if len(d.episodes) >= d.maxEpisodes && !first {
		delete(d.episodes, oldest)
	}
}

// touches reports whether a FieldsV1 set includes one of paths: the path itself, a field
// inside it, or an ancestor owned whole (an atomic list or map is a leaf: {}). A path element
// starting with "k:" is a list item's key, taken as it is.
func touches(f *metav1.FieldsV1, paths [][]string) bool {
	if f == nil || len(f.GetRawBytes()) == 0 {
		return false
	}
	var root map[string]json.RawMessage
	if err := json.Unmarshal(f.GetRawBytes(), &root); err != nil {
		return false
	}
	return slices.ContainsFunc(paths, func(p []string) bool { return under(root, p) })
}

func under(node map[string]json.RawMessage, path []string) bool {
	for i, name := range path {
		key := "f:" + name
		if strings.HasPrefix(name, "k:") {
			key = name
		}
		raw, ok := node[key]
		if !ok {
			return false
		}
		if i == len(path)-1 {
			return true
		}
		var next map[string]json.RawMessage
		if err := json.Unmarshal(raw, &next); err != nil {
			return false
		}
		if len(next) == 0 {
			return true // owned whole
		}
		node = next
	}
	return false
}
