package logging

import "github.com/go-logr/logr"

// otherFileEnabled reports whether l.V(n) is enabled at a call site in this file, which
// TestVModule's --vmodule does not name.
func otherFileEnabled(l logr.Logger, n int) bool { return l.V(n).Enabled() }
