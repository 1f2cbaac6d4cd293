package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bam-go/bam/kv"
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

func TestKVBytesCommands(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "s")
	if _, e, rc := runCLI(t, "init", store, "--size", "32MiB"); rc != 0 {
		t.Fatalf("init: %s", e)
	}
	long := strings.Repeat("a longer value with spaces ", 40)
	in := filepath.Join(dir, "in.txt")
	os.WriteFile(in, []byte("1 one\n2 "+long+"\n3\n# comment\n4 four\n"), 0o644)
	if out, e, rc := runCLI(t, "kv", "load", store, "b", in, "--bytes"); rc != 0 || !strings.Contains(out, "loaded 4 entries") {
		t.Fatalf("load: rc %d out %q err %q", rc, out, e)
	}
	for i := range 5 {
		if _, e, rc := runCLI(t, "kv", "put", store, "b", "1", strings.Repeat("v", 100*(i+1))); rc != 0 {
			t.Fatalf("put: %s", e)
		}
	}
	if _, e, rc := runCLI(t, "kv", "put", store, "b", "9", "00ff0a", "--hex"); rc != 0 {
		t.Fatalf("put --hex: %s", e)
	}
	if _, e, rc := runCLI(t, "kv", "del", store, "b", "4", "77"); rc != 0 {
		t.Fatalf("del: %s", e)
	}
	checkGet := func(when string) {
		t.Helper()
		out, e, rc := runCLI(t, "kv", "get", store, "b", "1", "2", "3", "9", "--json")
		if rc != 0 {
			t.Fatalf("%s: get: rc %d err %q", when, rc, e)
		}
		var got []struct {
			Key   string `json:"key"`
			Found bool   `json:"found"`
			Size  int    `json:"size"`
			Value string `json:"value"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%s: get --json: %v\n%s", when, err, out)
		}
		want := []string{strings.Repeat("v", 500), strings.TrimSpace(long), "", "\x00\xff\n"}
		for i, g := range got {
			v, _ := hex.DecodeString(g.Value)
			if !g.Found || string(v) != want[i] || g.Size != len(want[i]) {
				t.Fatalf("%s: key %s = %+v, want %q", when, g.Key, g, want[i])
			}
		}
		out, _, rc = runCLI(t, "kv", "get", store, "b", "2", "9", "4")
		if rc != 1 || !strings.Contains(out, "2\t"+strings.TrimSpace(long)+"\n") || !strings.Contains(out, `9	"\x00\xff\n"`) || !strings.Contains(out, "4\t(not found)") {
			t.Fatalf("%s: get text: rc %d out %q", when, rc, out)
		}
	}
	checkGet("before compaction")

	type stat struct {
		Variant  string            `json:"variant"`
		Len      int               `json:"len"`
		ValueLog *kv.ValueLogStats `json:"value_log"`
		Verified bool              `json:"verified"`
	}
	readStat := func() stat {
		t.Helper()
		out, e, rc := runCLI(t, "kv", "stat", store, "b", "--json", "--verify")
		var st stat
		if rc != 0 || json.Unmarshal([]byte(out), &st) != nil || st.ValueLog == nil {
			t.Fatalf("stat: rc %d out %q err %q", rc, out, e)
		}
		return st
	}
	st := readStat()
	if st.Variant != "bytes" || st.Len != 4 || !st.Verified || st.ValueLog.DeadBytes == 0 {
		t.Fatalf("stat before compaction: %+v, %+v", st, st.ValueLog)
	}
	out, e, rc := runCLI(t, "kv", "compact", store, "b", "--min-dead", "0.99")
	if rc != 0 || !strings.Contains(out, "not compacted") {
		t.Fatalf("compact under --min-dead: rc %d out %q err %q", rc, out, e)
	}
	out, e, rc = runCLI(t, "kv", "compact", store, "b", "--json")
	var res kv.CompactResult
	if rc != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Skipped || res.Entries != 4 || res.ReclaimedBytes == 0 {
		t.Fatalf("compact: rc %d out %q err %q", rc, out, e)
	}
	if st := readStat(); st.ValueLog.DeadBytes != 0 || st.ValueLog.Segments != 1 || st.ValueLog.LiveBytes != res.Before.LiveBytes {
		t.Fatalf("stat after compaction: %+v", st.ValueLog)
	}
	checkGet("after compaction")
	if out, _, rc := runCLI(t, "kv", "stat", store, "b"); rc != 0 || !strings.Contains(out, "value log") || !strings.Contains(out, "any length") {
		t.Fatalf("stat text: rc %d out %q", rc, out)
	}

	// Wrong kinds and bad input.
	if _, e, rc := runCLI(t, "kv", "put", store, "f", "1", "x", "--value-size", "8"); rc != 0 {
		t.Fatalf("create fixed: %s", e)
	}
	for _, tc := range []struct {
		args []string
		rc   int
		msg  string
	}{
		{[]string{"compact", store, "f"}, 1, "no value log"},
		{[]string{"put", store, "f", "2", "x", "--bytes"}, 1, "fixed-size values"},
		{[]string{"put", store, "b", "2", "x", "--value-size", "8"}, 1, "drop --value-size"},
		{[]string{"put", store, "f", "2", "x", "--value-size", "16"}, 1, "8-byte values"},
		{[]string{"put", store, "n", "2", "x", "--value-size", "8", "--bytes"}, 2, "not both"},
		{[]string{"put", store, "n", "2", "x"}, 2, "--bytes"},
		{[]string{"put", store, "b", "2", "zz", "--hex"}, 2, "invalid byte"},
		{[]string{"get", store, "b", "1x"}, 2, "unsigned"},
		{[]string{"del", store, "missing", "1"}, 1, "not found"},
		{[]string{"compact", store, "missing"}, 1, "not found"},
		{[]string{"compact", store, "b", "--min-dead", "3"}, 2, "--min-dead"},
		{[]string{"compact", store}, 2, "STORE TABLE"},
	} {
		_, e, rc := runCLI(t, append([]string{"kv"}, tc.args...)...)
		if rc != tc.rc || !strings.Contains(e, tc.msg) {
			t.Errorf("bam kv %s: rc %d err %q; want rc %d and %q", strings.Join(tc.args, " "), rc, e, tc.rc, tc.msg)
		}
	}
	if _, e, rc := runCLI(t, "kv", "stat", store, "n"); rc != 1 || !strings.Contains(e, "not found") {
		t.Errorf("a failed put created a table: rc %d err %q", rc, e)
	}
}
