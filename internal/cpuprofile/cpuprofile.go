// Package cpuprofile starts a CPU profile of a whole command when the
// environment asks for one (BAM_CPUPROFILE=FILE): the way to see where host
// threads, above all the Target's workers, spend their time during a
// benchmark. It owns nothing but the profile file; it must not change what
// the command does.
package cpuprofile

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// EnvVar names the file the profile is written to.
const EnvVar = "BAM_CPUPROFILE"

// FromEnv starts a CPU profile into the file named by BAM_CPUPROFILE, when
// set, and returns the function that ends it. Problems are reported on
// stderr, prefixed with prog, and never stop the command.
func FromEnv(prog string, stderr io.Writer) (stop func()) {
	path := os.Getenv(EnvVar)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s: %v (no profile written)\n", prog, EnvVar, err)
		if f != nil {
			f.Close()
		}
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "%s: %s: %v\n", prog, EnvVar, err)
		}
	}
}
