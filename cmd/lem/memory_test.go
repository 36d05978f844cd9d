package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/internal/fixtures"
)

// runLemBin runs the built lem binary with extra environment and returns
// its standard output, standard error and error.
func runLemBin(t *testing.T, env []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(buildLem(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// TestMemoryCheck runs lem generate with lem-tiny against available
// memory lowered through engine.EnvAvailableMemory: the weights alone too
// large, an asked-for context too large, a context the memory bounds, a
// context beyond the trained length, and plenty of memory.
func TestMemoryCheck(t *testing.T) {
	plan, err := engine.PlanMemory("", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, pos := plan.Weights, plan.PositionBytes
	if w <= 0 || pos <= 0 || plan.Trained != 2048 {
		t.Fatalf("lem-tiny's plan: %+v", plan)
	}
	gen := []string{"generate", "--device", "cpu", "--prompt", "Hi", "--max-tokens", "1", "--temperature", "0"}
	for _, tt := range []struct {
		name      string
		available int64
		args      []string
		fails     bool
		want      []string // in the error output
	}{
		{"weights too large", w / 2, nil, true,
			[]string{"the weights take", " GiB", "but only", "smaller quantization"}},
		{"context too large", w + 1024*pos, []string{"--ctx", "2048"}, true,
			[]string{"KV cache of 2048 tokens", " GiB", "use --ctx 1024 or less"}},
		{"context bounded by memory", w + 2*512*pos, nil, false,
			[]string{"context 512 tokens (bounded by memory", "trained on 2048"}},
		{"beyond the trained length", 1 << 40, []string{"--ctx", "4096"}, false,
			[]string{"warning: a context of 4096 tokens is beyond the 2048 the model was trained on", "context 4096 tokens (asked for)"}},
		{"plenty", 1 << 40, nil, false,
			[]string{"context 2048 tokens (the model's trained length)"}},
	} {
		_, errOut, err := runLemBin(t, []string{fmt.Sprintf("%s=%d", engine.EnvAvailableMemory, tt.available)}, append(gen, tt.args...)...)
		if (err != nil) != tt.fails {
			t.Errorf("%s: err = %v, want failure %v\n%s", tt.name, err, tt.fails, errOut)
		}
		for _, want := range tt.want {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s: standard error lacks %q:\n%s", tt.name, want, errOut)
			}
		}
	}
}

// TestFileTypeEverywhere quantizes a fixture to several GGUF types and
// checks that quant, inspect, bench, /api/tags and /api/show name each
// file's type alike, from general.file_type.
func TestFileTypeEverywhere(t *testing.T) {
	dir := fixtures.Dir(t, "chat-model")
	tmp := t.TempDir()
	for _, tt := range []struct{ flag, want string }{
		{"q4_k_m", "Q4_K_M"},
		{"q8_0", "Q8_0"},
		{"q6_k", "Q6_K"},
		{"f16", "F16"},
	} {
		path := filepath.Join(tmp, "chat."+tt.want+".gguf")
		out, err := execLemIn(t, "", "quant", dir, "--gguf", tt.flag, "-o", path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, ": "+tt.want+", ") {
			t.Errorf("%s: quant says %q", tt.want, out)
		}
		out, err = execLemIn(t, "", "inspect", "--json", path)
		var in inspection
		if err != nil || json.Unmarshal([]byte(out), &in) != nil || in.FileType != tt.want {
			t.Errorf("%s: inspect --json file_type %q (%v)", tt.want, in.FileType, err)
		}
		if out, _ := execLemIn(t, "", "inspect", path); !strings.Contains(out, "file type       "+tt.want+"\n") {
			t.Errorf("%s: inspect:\n%s", tt.want, out)
		}
		out, err = execLemIn(t, "", "bench", path, "--device", "cpu", "-p", "8", "-n", "4", "-r", "1", "--mem-buffer", "16", "--json")
		var rep benchReport
		if err != nil || json.Unmarshal([]byte(out), &rep) != nil || !strings.HasSuffix(rep.Label, " "+tt.want) {
			t.Errorf("%s: bench label %q (%v)", tt.want, rep.Label, err)
		}
		url := startServe(t, path)
		var tags struct {
			Models []struct {
				Details struct {
					QuantizationLevel string `json:"quantization_level"`
				} `json:"details"`
			} `json:"models"`
		}
		getJSON(t, url+"/api/tags", "", &tags)
		if len(tags.Models) != 1 || tags.Models[0].Details.QuantizationLevel != tt.want {
			t.Errorf("%s: /api/tags: %+v", tt.want, tags)
		}
		var show struct {
			Details struct {
				QuantizationLevel string `json:"quantization_level"`
			} `json:"details"`
		}
		getJSON(t, url+"/api/show", `{"model":"chat"}`, &show)
		if show.Details.QuantizationLevel != tt.want {
			t.Errorf("%s: /api/show: %+v", tt.want, show)
		}
	}
}

// getJSON GETs url (or POSTs body when there is one) and decodes the
// answer into v.
func getJSON(t *testing.T, url, body string, v any) {
	t.Helper()
	var resp *http.Response
	var err error
	if body == "" {
		resp, err = http.Get(url)
	} else {
		resp, err = http.Post(url, "application/json", strings.NewReader(body))
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", url, resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v: %s", url, err, data)
	}
}
