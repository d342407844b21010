package legacyip

import "testing"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{in: "10.1.0.1", want: "10.1.0.1", ok: true},
		{in: "010.001.000.001", want: "10.1.0.1", ok: true}, // legacy leading zeros are decimal
		{in: "010.001.0.1", want: "10.1.0.1", ok: true},
		{in: "2001:db8::1", want: "2001:db8::1", ok: true},
		{in: "2001:DB8:0::1", want: "2001:db8::1", ok: true},
		{in: "::ffff:10.1.0.1", want: "10.1.0.1", ok: true},
		{in: "fe80::1%eth0", ok: false},
		{in: "256.1.1.1", ok: false},
		{in: "1.2.3.256", ok: false},
		{in: "1.2.3", ok: false},
		{in: "1.2.3.4.5", ok: false},
		{in: "1.2.3.4.", ok: false},
		{in: "1..2.3", ok: false},
		{in: "0001.2.3.4", ok: false},
		{in: "+1.2.3.4", ok: false},
		{in: "x", ok: false},
		{in: "", ok: false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			a, ok := Parse(tc.in)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if ok && a.String() != tc.want {
				t.Errorf("Parse(%q) = %s, want %s", tc.in, a, tc.want)
			}
		})
	}
}
