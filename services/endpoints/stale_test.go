package endpoints

import "testing"

func TestStaleTracker(t *testing.T) {
	tr := newStaleTracker()
	if tr.isStale(testNS, "s", "5") {
		t.Fatal("unknown Endpoints reported stale")
	}
	tr.replacedVersion(testNS, "s", "5")
	for _, tc := range []struct {
		name, ns, obj, rv string
		want              bool
	}{
		{name: "the replaced version", ns: testNS, obj: "s", rv: "5", want: true},
		{name: "the new version", ns: testNS, obj: "s", rv: "6", want: false},
		{name: "another object", ns: testNS, obj: "t", rv: "5", want: false},
		{name: "another namespace", ns: "other", obj: "s", rv: "5", want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tr.isStale(tc.ns, tc.obj, tc.rv); got != tc.want {
				t.Errorf("isStale = %v, want %v", got, tc.want)
			}
		})
	}
	tr.replacedVersion(testNS, "s", "6")
	if tr.isStale(testNS, "s", "5") || !tr.isStale(testNS, "s", "6") {
		t.Error("a later write did not take over")
	}
	tr.forget(testNS, "s")
	if tr.isStale(testNS, "s", "6") {
		t.Error("forgotten Endpoints still stale")
	}
}
