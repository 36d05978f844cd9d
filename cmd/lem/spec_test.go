package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestSpecCmd(t *testing.T) {
	out, err := execLemIn(t, "", "spec")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Info    struct{ Version string }  `json:"info"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("lem spec printed no JSON: %v", err)
	}
	if doc.OpenAPI != "3.1.0" || doc.Info.Version != version {
		t.Errorf("openapi %q, version %q", doc.OpenAPI, doc.Info.Version)
	}
	for _, op := range []struct{ path, method string }{{"/v1/chat/completions", "post"}, {"/api/chat", "post"}, {"/v1/messages", "post"}, {"/openapi.json", "get"}} {
		if doc.Paths[op.path][op.method] == nil {
			t.Errorf("no %s %s in the document", op.method, op.path)
		}
	}

	file := filepath.Join(t.TempDir(), "openapi.json")
	if _, err := execLemIn(t, "", "spec", "-o", file); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, []byte(out)) {
		t.Error("lem spec -o wrote another document than lem spec")
	}
	if _, err := execLemIn(t, "", "spec", "-o", filepath.Join(t.TempDir(), "no", "such", "dir", "x.json")); err == nil {
		t.Error("writing into a missing directory: no error")
	}
}
