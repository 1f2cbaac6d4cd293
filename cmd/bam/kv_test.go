package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	rc := runMain(context.Background(), &env{stdout: &out, stderr: &errb}, args)
	return out.String(), errb.String(), rc
}

func TestKVCommands(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "s")
	if _, e, rc := runCLI(t, "init", store, "--size", "32MiB"); rc != 0 {
		t.Fatalf("init: %s", e)
	}
	in := filepath.Join(dir, "in.txt")
	os.WriteFile(in, []byte("1 one\n2 two\n# comment\n\n3 three\n"), 0o644)
	if _, e, rc := runCLI(t, "kv", "load", store, "t", in, "--value-size", "8"); rc != 0 {
		t.Fatalf("load: %s", e)
	}
	if _, e, rc := runCLI(t, "kv", "put", store, "t", "9", "6e696e65", "--hex"); rc != 0 {
		t.Fatalf("put: %s", e)
	}
	out, e, rc := runCLI(t, "kv", "get", store, "t", "1", "3", "9")
	if rc != 0 || !strings.Contains(out, "1\tone") || !strings.Contains(out, "3\tthree") || !strings.Contains(out, "9\tnine") {
		t.Fatalf("get: rc %d out %q err %q", rc, out, e)
	}
	if out, _, rc := runCLI(t, "kv", "get", store, "t", "4"); rc != 1 || !strings.Contains(out, "not found") {
		t.Fatalf("get missing: rc %d out %q", rc, out)
	}
	out, e, rc = runCLI(t, "kv", "stat", store, "t", "--json", "--verify")
	if rc != 0 || !strings.Contains(out, `"len": 4`) {
		t.Fatalf("stat: rc %d out %q err %q", rc, out, e)
	}
	if _, e, rc := runCLI(t, "kv", "put", store, "t", "5", "much too long a value"); rc != 1 || !strings.Contains(e, "longer") {
		t.Fatalf("long value: rc %d err %q", rc, e)
	}
	if _, _, rc := runCLI(t, "kv", "get", store, "t", "abc"); rc != 2 {
		t.Fatalf("bad key: rc %d", rc)
	}
	if _, e, rc := runCLI(t, "kv", "put", store, "new", "1", "x"); rc != 2 || !strings.Contains(e, "--value-size") {
		t.Fatalf("create without size: rc %d err %q", rc, e)
	}
	if _, _, rc := runCLI(t, "kv", "frob"); rc != 2 {
		t.Fatalf("unknown subcommand: rc %d", rc)
	}
}
