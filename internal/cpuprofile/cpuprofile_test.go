package cpuprofile

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFromEnv(t *testing.T) {
	var stderr bytes.Buffer
	t.Setenv(EnvVar, "")
	FromEnv("x", &stderr)()
	if stderr.Len() != 0 {
		t.Fatalf("unset: %q", stderr.String())
	}

	path := filepath.Join(t.TempDir(), "cpu.prof")
	t.Setenv(EnvVar, path)
	FromEnv("x", &stderr)()
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("profile not written: %v", err)
	}

	t.Setenv(EnvVar, filepath.Join(t.TempDir(), "missing", "cpu.prof"))
	FromEnv("x", &stderr)()
	if !strings.Contains(stderr.String(), "x: BAM_CPUPROFILE") {
		t.Fatalf("no complaint about an unwritable path: %q", stderr.String())
	}
}
