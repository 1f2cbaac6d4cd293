package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func TestInfoRunsAnywhere(t *testing.T) {
	var out, errb bytes.Buffer
	e := &env{stdout: &out, stderr: &errb}
	if code := runMain(context.Background(), e, []string{"info"}); code != 0 {
		t.Fatalf("bam info exited %d: %s", code, errb.String())
	}
	text := out.String()
	if !strings.Contains(text, "cpu  available") {
		t.Errorf("CPU engine not reported:\n%s", text)
	}
	if !strings.Contains(text, "GPU 0:") && !strings.Contains(text, "the CPU engine is available") {
		t.Errorf("neither a GPU nor the no-GPU headline:\n%s", text)
	}

	out.Reset()
	if code := runMain(context.Background(), e, []string{"info", "--json"}); code != 0 {
		t.Fatalf("bam info --json exited %d: %s", code, errb.String())
	}
	var v struct {
		Engines []struct {
			Name      string `json:"name"`
			Available bool   `json:"available"`
		} `json:"engines"`
		GPUs []any `json:"gpus"`
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("bad JSON %q: %v", out.String(), err)
	}
	if len(v.Engines) != 2 || v.Engines[0].Name != "cpu" || !v.Engines[0].Available || v.GPUs == nil {
		t.Errorf("JSON %s", out.String())
	}

	if code := runMain(context.Background(), e, []string{"info", "extra"}); code != 2 {
		t.Errorf("bam info extra exited %d, want 2", code)
	}
}
