package leasestate

import (
	"context"
	"time"
)

// Keeper is the loop every holder's keeper runs: read the ConfigMap (Load) while the store is
// not Loaded, then write what is to be kept (Save) whenever Wake fires, every Heartbeat (0:
// never) and, after a failed read or write, once more after Retry, until ctx ends. Load and
// Save report success; a Save is never tried before a Load succeeded (a Store refuses it
// anyway), so a holder never overwrites what it has not read.
type Keeper struct {
	Loaded    func() bool // the Store's Loaded
	Load      func(context.Context) bool
	Save      func(context.Context) bool
	Wake      <-chan struct{}
	Heartbeat time.Duration
	Retry     time.Duration
}

// Run runs the loop until ctx ends.
func (k Keeper) Run(ctx context.Context) {
	var tick <-chan time.Time
	if k.Heartbeat > 0 {
		t := time.NewTicker(k.Heartbeat)
		defer t.Stop()
		tick = t.C
	}
	for {
		ok := k.Loaded() || k.Load(ctx)
		if ok {
			ok = k.Save(ctx)
		}
		var retry <-chan time.Time
		if !ok {
			retry = time.After(k.Retry)
		}
		select {
		case <-ctx.Done():
			return
		case <-k.Wake:
		case <-tick:
		case <-retry:
		}
	}
}
