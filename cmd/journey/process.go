package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// processUse is what this process has used so far: its CPU, user and system (-1 if unknown),
// and the heap objects it has allocated.
type processUse struct {
	cpu    time.Duration
	allocs uint64
}

func processNow() processUse {
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(sample)
	u := processUse{cpu: -1, allocs: sample[0].Value.Uint64()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		u.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return u
}

// since returns the CPU and the allocations used since u.
func (u processUse) since() (time.Duration, uint64) {
	now := processNow()
	cpu := time.Duration(-1)
	if u.cpu >= 0 && now.cpu >= 0 {
		cpu = now.cpu - u.cpu
	}
	return cpu, now.allocs - u.allocs
}

// startCPUProfile starts a CPU profile into file, if one is given; stop ends it, and may be called
// again.
func startCPUProfile(file string) (stop func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.Create(file)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return sync.OnceFunc(func() {
		pprof.StopCPUProfile()
		f.Close()
	}), nil
}

// writeHeapProfile writes the process's allocations so far to file+suffix, if file is given.
func writeHeapProfile(file, suffix string) error {
	if file == "" {
		return nil
	}
	f, err := os.Create(file + suffix)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		return fmt.Errorf("-memprofile: %w", err)
	}
	return nil
}

// clockTicks is the unit of the CPU times of /proc/PID/stat: USER_HZ, 100 on Linux.
const clockTicks = 100

// processTreeCPU returns the CPU, user and system, that process pid and its children have used
// so far: its own, what its children that ended used (once it reaped them), and what its live
// children used; -1 if /proc cannot tell. A PostgreSQL server's postmaster reaps every backend
// that ends, so this is all the server's CPU.
func processTreeCPU(pid int) time.Duration {
	fields := func(path string) []string {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		// pid (comm) state ppid …: comm may hold spaces, so the fields start after its ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			return nil
		}
		return strings.Fields(string(b[i+1:]))
	}
	// After the ')': state is 0, ppid 1, utime 11, stime 12, cutime 13, cstime 14.
	ticks := func(f []string) int64 {
		var n int64
		for _, i := range []int{11, 12, 13, 14} {
			v, _ := strconv.ParseInt(f[i], 10, 64)
			n += v
		}
		return n
	}
	// A child that ends while its siblings are read would be counted in neither place, or in
	// both: the reading is kept only if the postmaster reaped no child meanwhile.
	stat, parent := fmt.Sprintf("/proc/%d/stat", pid), strconv.Itoa(pid)
	for range 10 {
		before := fields(stat)
		if len(before) < 15 {
			return -1
		}
		total := ticks(before)
		paths, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, path := range paths {
			if f := fields(path); len(f) >= 15 && f[1] == parent {
				total += ticks(f)
			}
		}
		if after := fields(stat); len(after) >= 15 && after[13] == before[13] && after[14] == before[14] {
			return time.Duration(total) * time.Second / clockTicks
		}
	}
	return -1
}
