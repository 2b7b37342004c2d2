package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/metrics"
	"runtime/pprof"
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
