package benchkit

import (
	"os"
	"testing"
	"time"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseStatCPU(t *testing.T) {
	// utime 1234 + stime 567 ticks of 10 ms; the command name holds spaces and parentheses.
	got, err := ParseStatCPU(fixture(t, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	if want := 18010 * time.Millisecond; got != want {
		t.Errorf("ParseStatCPU = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "1 (x) S 1 2 3", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 12 13"} {
		if _, err := ParseStatCPU([]byte(bad)); err == nil {
			t.Errorf("ParseStatCPU(%q): no error", bad)
		}
	}
}

func TestParseStatus(t *testing.T) {
	want := Memory{RSS: 95232 << 10, HWM: 98304 << 10, Anon: 49560 << 10}
	if got, err := ParseStatus(fixture(t, "status")); err != nil || got != want {
		t.Errorf("ParseStatus = %+v, %v; want %+v", got, err, want)
	}
	if _, err := ParseStatus([]byte("Name:\tzombie\nState:\tZ (zombie)\n")); err == nil {
		t.Error("a status without VmRSS parsed")
	}
	if _, err := ParseStatus([]byte("VmRSS:\t  lots kB\n")); err == nil {
		t.Error("a malformed VmRSS parsed")
	}
}

// The live /proc of this test process parses too: the fixture is not all the parser knows.

func TestReadOwnProcess(t *testing.T) {
	pid := os.Getpid()
	if _, err := ReadCPU(pid); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMemory(pid)
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.HWM < m.RSS || m.Anon <= 0 || m.Anon > m.RSS {
		t.Errorf("implausible memory of this process: %+v", m)
	}
}
