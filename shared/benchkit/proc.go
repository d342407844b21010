package benchkit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat: USER_HZ, which is 100 on every
// architecture Go supports.
const userHZ = 100

// ParseStatCPU returns user + system CPU time from the contents of /proc/<pid>/stat.
func ParseStatCPU(stat []byte) (time.Duration, error) {
	// The command name, in parentheses, may hold spaces and parentheses; fields are counted
	// from the last ")". After it come state (field 3), ..., utime (14) and stime (15).
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, errors.New("no command name in /proc/<pid>/stat")
	}
	fields := strings.Fields(string(stat[end+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/<pid>/stat has %d fields after the command name, want at least 13", len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("parsing /proc/<pid>/stat: %w", err)
	}
	return time.Duration(utime+stime) * (time.Second / userHZ), nil
}

// Memory is the part of /proc/<pid>/status the benchmarks read, in bytes.
type Memory struct {
	// RSS is VmRSS: resident memory now.
	RSS int64
	// HWM is VmHWM: the peak of RSS over the process's life.
	HWM int64
	// Anon is RssAnon: heap, stacks and runtime memory, without the file-backed pages of the
	// executable that RSS also counts (clean, shared, and dropped first under pressure).
	Anon int64
}

// ParseStatus reads VmRSS, VmHWM and RssAnon from the contents of /proc/<pid>/status. A
// status without VmRSS (a zombie, a kernel thread) is an error.
func ParseStatus(status []byte) (Memory, error) {
	var m Memory
	fields := map[string]*int64{"VmRSS": &m.RSS, "VmHWM": &m.HWM, "RssAnon": &m.Anon}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		dst := fields[name]
		if !ok || dst == nil {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("parsing %s %q: %w", name, value, err)
		}
		*dst = kb << 10
	}
	if err := sc.Err(); err != nil {
		return Memory{}, err
	}
	if m.RSS == 0 {
		return Memory{}, errors.New("no VmRSS in /proc/<pid>/status")
	}
	return m, nil
}

// ReadCPU returns the CPU time process pid has used so far.
func ReadCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return ParseStatCPU(data)
}

// ReadMemory returns process pid's memory now.
func ReadMemory(pid int) (Memory, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	return ParseStatus(data)
}
