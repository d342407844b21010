package churn

import (
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// GapTable is the longest time nothing acted on a change, per window and controller: a title,
// a header, then one row per window giving each loop's Gap in seconds and the number of
// changes it covers.
func (c *Churn) GapTable(windows []Window) []string {
	out := []string{"longest time nothing acted on a change, per controller (s; changes covered):"}
	var hdr strings.Builder
	fmt.Fprintf(&hdr, "%-44s", "phase")
	for _, l := range c.loops {
		fmt.Fprintf(&hdr, " %16s", l.name)
	}
	out = append(out, hdr.String())
	for _, w := range windows {
		var line strings.Builder
		fmt.Fprintf(&line, "%-44s", w.Name)
		for _, l := range c.loops {
			g, n := l.Gap(w)
			fmt.Fprintf(&line, " %10.2f (%3d)", g.Seconds(), n)
		}
		out = append(out, line.String())
	}
	return out
}

// GapMax is the longest Gap in w over the loops, but those named in skip (a controller whose
// figures are not a handover's: servicelb, which KCM never runs).
func (c *Churn) GapMax(w Window, skip ...string) time.Duration {
	var worst time.Duration
	for _, l := range c.loops {
		if slices.Contains(skip, l.name) {
			continue
		}
		g, _ := l.Gap(w)
		worst = max(worst, g)
	}
	return worst
}

// SlowChanges describes, one line each, every change pending during one of windows that waited
// longer than d: the changes behind a GapTable's figures.
func (c *Churn) SlowChanges(windows []Window, d time.Duration) []string {
	var out []string
	for _, w := range windows {
		for _, l := range c.loops {
			for _, s := range l.Slow(w, d) {
				seen := "never"
				if !s.Seen.IsZero() {
					seen = fmt.Sprintf("after %.2fs", s.Seen.Sub(s.At).Seconds())
				}
				out = append(out, fmt.Sprintf("slow in %q: %s: %s at %s, effect %s", w.Name, l.name, s.What, s.At.Format(time.StampMilli), seen))
			}
		}
	}
	return out
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
