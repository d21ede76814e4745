package tests

import (
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// parallelPerCPU is how many parallel tests run at once per CPU unless
// -test.parallel says otherwise. go test's default, one per CPU, suits
// tests that compute; these end-to-end tests mostly wait (token delays,
// timeouts, leases, polls): on 2 CPUs the tests that run in parallel take
// about 23 s two at a time, 7 s eight at a time, for about 20% CPU.
const parallelPerCPU = 4

// TestMain sets the parallelism and removes the reprise binary that
// reprisebin built once the tests are done.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", strconv.Itoa(parallelPerCPU*runtime.GOMAXPROCS(0)))
	}
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}
