package informer

import "testing"

func TestInternerSharesEqualValuesAndStaysBounded(t *testing.T) {
	in := NewInterner[*int](2)
	one, two := new(int), new(int)
	if got := in.Get("a", one); got != one {
		t.Fatal("first value of a key is not kept")
	}
	if got := in.Get("a", two); got != one {
		t.Fatal("second value of a key is not the first")
	}
	in.Get("b", new(int)) // fills the current generation
	in.Get("c", new(int)) // a, b move to the previous one
	if got := in.Get("a", two); got != one {
		t.Fatal("a value of the previous generation is not found")
	}
	in.Get("d", new(int))
	in.Get("e", new(int))
	in.Get("f", new(int))
	if n := in.Len(); n > 4 {
		t.Fatalf("%d values remembered, want at most twice the limit", n)
	}
	if got := in.Get("b", two); got != two {
		t.Fatal("a value two generations old is still shared")
	}
}
