//go:build ignore

// Bitcheck prints, for every model folder under a fixtures folder, a hash
// of the CPU logits of a fixed prompt (all at once, then token by token),
// and for each of the GGUF types f32, q8_0 and q4_k_m a hash of the file
// lem quant writes and of the logits read back from it. Two trees whose
// outputs are the same compute the same bits and write the same files:
//
//	go run scripts/bitcheck.go ../shared/fixtures/archs > new.txt
//	(in the other tree) go run scripts/bitcheck.go ../shared/fixtures/archs > old.txt
//	diff old.txt new.txt
package main

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"math"
	"os"
	"path/filepath"
	"sort"

	"github.com/lem-engine/lem/compute"
	"github.com/lem-engine/lem/compute/device"
	"github.com/lem-engine/lem/convert"
	"github.com/lem-engine/lem/engine"
	"github.com/lem-engine/lem/model"
)

var prompt = []int32{1, 5, 9, 17, 33, 2, 40, 77, 100, 3, 8, 12, 60, 61, 62, 7, 4, 90, 11, 23}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run scripts/bitcheck.go FIXTURES_DIR")
		os.Exit(2)
	}
	root := os.Args[1]
	b, _, err := device.Open("cpu", 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmp, err := os.MkdirTemp("", "bitcheck")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(tmp)
	ents, err := os.ReadDir(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var names []string
	for _, e := range ents {
		if fi, err := os.Stat(filepath.Join(root, e.Name())); err == nil && fi.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		dir := filepath.Join(root, n)
		if l, err := model.OpenDir(dir, b); err != nil {
			fmt.Printf("%-24s st     ERR %v\n", n, err)
		} else {
			fmt.Printf("%-24s st     logits %s\n", n, logits(l.Model, b))
			l.Close()
		}
		for _, typ := range []string{"f32", "q8_0", "q4_k_m"} {
			dst := filepath.Join(tmp, n+"."+typ+".gguf")
			if _, err := convert.ToGGUF(dir, dst, convert.GGUFOptions{Type: typ}); err != nil {
				fmt.Printf("%-24s %-6s ERR %v\n", n, typ, err)
				continue
			}
			data, err := os.ReadFile(dst)
			if err != nil {
				fmt.Printf("%-24s %-6s ERR %v\n", n, typ, err)
				continue
			}
			file := fmt.Sprintf("%x", sha256.Sum256(data))[:16]
			g, err := model.OpenGGUFWith(dst, b, model.GGUFOptions{})
			if err != nil {
				fmt.Printf("%-24s %-6s file %s ERR %v\n", n, typ, file, err)
				continue
			}
			fmt.Printf("%-24s %-6s file %s logits %s\n", n, typ, file, logits(g.Model, b))
			g.Close()
		}
	}
}

// logits hashes the logits of the prompt run at once and of its second
// half run token by token after its first.
func logits(m model.Model, b compute.Backend) string {
	h := sha256.New()
	rows, err := engine.NewSession(m, b, 64).AppendAll(prompt)
	if err != nil {
		return "ERR " + err.Error()
	}
	for _, r := range rows {
		write(h, r)
	}
	s := engine.NewSession(m, b, 64)
	last, err := s.Append(prompt[:8])
	for i := 8; i < 16 && err == nil; i++ {
		last, err = s.Append(prompt[i : i+1])
	}
	if err != nil {
		return "ERR " + err.Error()
	}
	write(h, last)
	return fmt.Sprintf("%x", h.Sum(nil))[:16]
}

func write(h hash.Hash, xs []float32) {
	var buf [4]byte
	for _, x := range xs {
		binary.LittleEndian.PutUint32(buf[:], math.Float32bits(x))
		h.Write(buf[:])
	}
}
