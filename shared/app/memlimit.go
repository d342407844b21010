package app

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// MemoryLimitFraction is the share of the container's memory limit given to the Go runtime as
// its soft limit (GOMEMLIMIT) when GOMEMLIMIT is not set: the garbage collector works harder
// as the heap nears it instead of letting the process be OOM-killed, and the rest is headroom
// for what the runtime does not count (stacks of exiting goroutines, fragmentation, the
// binary's own mapped pages).
const MemoryLimitFraction = 0.9

// cgroupMemoryFiles are where the memory limit of the process's container is read: cgroup v2's
// memory.max, then cgroup v1's memory.limit_in_bytes.
var cgroupMemoryFiles = []string{"memory.max", "memory/memory.limit_in_bytes"}

// unlimitedV1 is at or above what cgroup v1 reports for "no limit" (a page-rounded MaxInt64).
const unlimitedV1 = 1 << 62

// CgroupMemoryLimit returns the memory limit in bytes of the cgroup mounted at root (normally
// /sys/fs/cgroup), or false when there is none (no file, "max", or v1's huge sentinel).
func CgroupMemoryLimit(root string) (int64, bool) {
	for _, name := range cgroupMemoryFiles {
		raw, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(raw))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= unlimitedV1 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// errMemoryLimitSet says GOMEMLIMIT was given, so the runtime already applied it.
var errMemoryLimitSet = errors.New("GOMEMLIMIT is set")

// applyMemoryLimit sets the runtime's soft memory limit to MemoryLimitFraction of the cgroup
// limit under root unless goMemLimit (the GOMEMLIMIT environment variable) is set, and
// returns the limit it set.
func applyMemoryLimit(goMemLimit, root string, set func(int64) int64) (int64, error) {
	if goMemLimit != "" {
		return 0, errMemoryLimitSet
	}
	limit, ok := CgroupMemoryLimit(root)
	if !ok {
		return 0, errors.New("no cgroup memory limit")
	}
	soft := int64(float64(limit) * MemoryLimitFraction)
	set(soft)
	return soft, nil
}

// setMemoryLimitFromCgroup is applyMemoryLimit for this process.
func setMemoryLimitFromCgroup() (int64, error) {
	return applyMemoryLimit(os.Getenv("GOMEMLIMIT"), "/sys/fs/cgroup", debug.SetMemoryLimit)
}
