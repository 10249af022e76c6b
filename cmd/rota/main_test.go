package main

import (
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// minParallel is how many end-to-end tests run at once unless -parallel says otherwise.
// They spend their time waiting on real processes, heartbeats and grace periods, not on
// the CPU, so testing's default (GOMAXPROCS, 2 on a small CI machine) would leave the
// machine idle and make the package take minutes longer.
const minParallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set && runtime.GOMAXPROCS(0) < minParallel {
		flag.Set("test.parallel", strconv.Itoa(minParallel))
	}
	code := m.Run()
	for _, b := range builds.bins {
		if b.path != "" {
			os.RemoveAll(filepath.Dir(b.path))
		}
	}
	os.Exit(code)
}
