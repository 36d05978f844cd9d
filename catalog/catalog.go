// Package catalog finds models by name: a path, an entry of lem's models
// directory, or a repository in the Hugging Face hub cache; and lists and
// removes the models in those two places.
package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lem-engine/lem/hub"
)

// Dirs are the places names are looked up in.
type Dirs struct {
	Models string // lem's models directory
	Hub    string // the Hugging Face hub cache
}

// ModelsDir returns lem's models directory: $LEM_MODELS, else
// $XDG_DATA_HOME/lem/models, else ~/.local/share/lem/models.
func ModelsDir() string {
	if d := os.Getenv("LEM_MODELS"); d != "" {
		return d
	}
	return filepath.Join(DataDir(), "models")
}

// DataDir returns lem's data directory, where it keeps what is not a
// model (the generated admin key): $XDG_DATA_HOME/lem, else
// ~/.local/share/lem. LEM_MODELS does not move it.
func DataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "lem")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".local", "share", "lem")
	}
	return filepath.Join(home, ".local", "share", "lem")
}

// DefaultDirs returns the directories the environment names (see
// ModelsDir and hub.CacheDir).
func DefaultDirs() Dirs { return Dirs{Models: ModelsDir(), Hub: hub.CacheDir()} }

// NotFoundError says a name was found nowhere, and where it was looked for.
type NotFoundError struct {
	Name   string
	Looked []string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("model %q not found; looked for:\n  %s\n(get one with `lem pull ORG/NAME[:QUANT]`; `lem list` shows what is here)", e.Name, strings.Join(e.Looked, "\n  "))
}

// Resolve returns the path of the model name names, trying in order:
//  1. name as a path (a file or a directory);
//  2. an entry of the models directory: name, or name.gguf; a directory of
//     GGUF files takes NAME:QUANT or NAME:FILE.gguf as a hub repository does;
//  3. a hub cache repository, ORG/NAME[:QUANT|:FILE.gguf], at its main
//     snapshot: the snapshot folder for a safetensors repository, the GGUF
//     file (the first part of a split one) for a GGUF repository (see
//     hub.SelectGGUF).
func Resolve(name string, d Dirs) (string, error) {
	if name == "" {
		return "", errors.New("empty model name")
	}
	_, err := os.Stat(name)
	if err == nil {
		return name, nil
	}
	looked := []string{fmt.Sprintf("the path %s (%v)", name, errors.Unwrap(err))}
	base, sel, _ := strings.Cut(name, ":")
	if d.Models != "" && base != "" && !strings.ContainsAny(base, `/\`) && base != "." && base != ".." {
		for _, cand := range []string{base, base + ".gguf"} {
			p := filepath.Join(d.Models, cand)
			st, err := os.Stat(p)
			if err != nil {
				continue
			}
			if !st.IsDir() {
				if sel != "" {
					return "", fmt.Errorf("model %q: %s is one file; there is nothing to choose with :%s", name, p, sel)
				}
				return p, nil
			}
			if HasManifest(p) {
				return manifestPath(name, p, sel)
			}
			return inFolder(name, p, sel)
		}
		looked = append(looked, fmt.Sprintf("%s or %s.gguf in the models directory %s (none; set LEM_MODELS to use another)", base, base, d.Models))
	}
	if d.Hub != "" && hub.ValidRepo(base) == nil {
		snap, err := hub.Snapshot(d.Hub, base, "")
		if err == nil {
			return inFolder(name, snap, sel)
		}
		looked = append(looked, fmt.Sprintf("%s in the Hugging Face hub cache %s (not there; set HF_HUB_CACHE or HF_HOME to use another)", base, d.Hub))
	}
	return "", &NotFoundError{Name: name, Looked: looked}
}

// manifestPath returns the weights the manifest in dir names.
func manifestPath(name, dir, sel string) (string, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return "", fmt.Errorf("model %q: %w", name, err)
	}
	st, err := os.Stat(m.From)
	if err != nil {
		return "", fmt.Errorf("model %q: the weights it was made from: %w", name, err)
	}
	if !st.IsDir() {
		if sel != "" {
			return "", fmt.Errorf("model %q: %s is one file; there is nothing to choose with :%s", name, m.From, sel)
		}
		return m.From, nil
	}
	return inFolder(name, m.From, sel)
}

// inFolder picks the model in a folder: the folder itself when it holds
// a Hugging Face model (config.json), else its GGUF file chosen by sel.
func inFolder(name, dir, sel string) (string, error) {
	files, err := hub.SnapshotFiles(dir)
	if err != nil {
		return "", fmt.Errorf("model %q: reading %s: %w", name, dir, err)
	}
	hasGGUF := slices.ContainsFunc(files, hub.IsGGUF)
	if sel == "" && (slices.Contains(files, "config.json") || !hasGGUF) {
		return dir, nil
	}
	if !hasGGUF {
		return "", fmt.Errorf("model %q: %s holds no GGUF files to choose from with :%s", name, dir, sel)
	}
	picked, err := hub.SelectGGUF(files, sel)
	if err != nil {
		return "", fmt.Errorf("model %q in %s: %w", name, dir, err)
	}
	return filepath.Join(dir, filepath.FromSlash(picked[0])), nil
}

// Entry is a model in the models directory or the hub cache.
type Entry struct {
	Name     string    // what to pass to lem run
	Where    string    // "models" or "hub"
	Path     string    // what Resolve returns for Name
	Size     int64     // bytes of its files
	Modified time.Time // latest modification of its files
	Format   string    // gguf or safetensors
	Quant    string    // Q4_K_M, BF16 … ("" when unknown)
	// Manifest is set for a model made from another's weights (its
	// folder holds a lem-model.json); Path is then those weights.
	Manifest *Manifest
}

// List returns the models of the models directory, then those of the hub
// cache, each sorted by name. Directories that do not exist hold none.
func List(d Dirs) ([]Entry, error) {
	var out []Entry
	if d.Models != "" {
		entries, err := os.ReadDir(d.Models)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("reading the models directory: %w", err)
		}
		for _, e := range entries {
			p := filepath.Join(d.Models, e.Name())
			st, err := os.Stat(p)
			if err != nil {
				continue
			}
			if !st.IsDir() {
				if hub.IsGGUF(e.Name()) {
					out = append(out, Entry{Name: strings.TrimSuffix(e.Name(), filepath.Ext(e.Name())), Where: "models", Path: p,
						Size: st.Size(), Modified: st.ModTime(), Format: "gguf", Quant: hub.QuantOf(e.Name())})
				}
				continue
			}
			if HasManifest(p) {
				if me, ok := manifestEntry(e.Name(), p); ok {
					out = append(out, me)
				}
				continue
			}
			out = append(out, folderEntries(e.Name(), "models", p)...)
		}
	}
	if d.Hub != "" {
		repos, err := hub.List(d.Hub)
		if err != nil {
			return nil, err
		}
		for _, r := range repos {
			snap, err := hub.Snapshot(d.Hub, r.ID, "")
			if err != nil {
				continue
			}
			out = append(out, folderEntries(r.ID, "hub", snap)...)
		}
	}
	return out, nil
}

// manifestEntry lists the model of a manifest folder, described by the
// weights it names; false when they are gone or unreadable.
func manifestEntry(name, dir string) (Entry, bool) {
	m, err := ReadManifest(dir)
	if err != nil {
		return Entry{}, false
	}
	path, err := manifestPath(name, dir, "")
	if err != nil {
		return Entry{}, false
	}
	e := Entry{Name: name, Where: "models", Path: path, Manifest: m, Format: "safetensors"}
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		e.Size, e.Modified, e.Format, e.Quant = st.Size(), st.ModTime(), "gguf", hub.QuantOf(filepath.Base(path))
	} else {
		e.Size, e.Quant = duSize(path), configQuant(path)
	}
	if st, err := os.Stat(filepath.Join(dir, ManifestFile)); err == nil {
		e.Modified = st.ModTime()
	}
	return e, true
}

// folderEntries lists the models of a folder named name: one for a
// Hugging Face model, one per GGUF model (NAME:QUANT) otherwise.
func folderEntries(name, where, dir string) []Entry {
	files, err := hub.SnapshotFiles(dir)
	if err != nil {
		return nil
	}
	stat := func(rel []string) (int64, time.Time) {
		var size int64
		var mod time.Time
		for _, f := range rel {
			if st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f))); err == nil {
				size += st.Size()
				if st.ModTime().After(mod) {
					mod = st.ModTime()
				}
			}
		}
		return size, mod
	}
	if slices.Contains(files, "config.json") || !slices.ContainsFunc(files, hub.IsGGUF) {
		if !slices.Contains(files, "config.json") {
			return nil
		}
		size, mod := stat(files)
		return []Entry{{Name: name, Where: where, Path: dir, Size: size, Modified: mod, Format: "safetensors", Quant: configQuant(dir)}}
	}
	var out []Entry
	for _, q := range hub.Quants(files) {
		sel := q // a tag, or the name of a file without one
		picked, err := hub.SelectGGUF(files, sel)
		if err != nil {
			continue
		}
		size, mod := stat(picked)
		quant := q
		if hub.IsGGUF(q) {
			quant = ""
		}
		out = append(out, Entry{Name: name + ":" + sel, Where: where, Path: filepath.Join(dir, filepath.FromSlash(picked[0])),
			Size: size, Modified: mod, Format: "gguf", Quant: quant})
	}
	return out
}

// configQuant reads the weights' type from a Hugging Face config.json:
// its quantization method and bits, or its torch_dtype.
func configQuant(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return ""
	}
	var c struct {
		DType string `json:"torch_dtype"`
		Quant *struct {
			Method string `json:"quant_method"`
			Bits   int    `json:"bits"`
		} `json:"quantization_config"`
		MLXQuant *struct {
			Bits int `json:"bits"`
		} `json:"quantization"`
	}
	if json.Unmarshal(b, &c) != nil {
		return ""
	}
	switch {
	case c.Quant != nil && c.Quant.Bits > 0:
		return fmt.Sprintf("%s %d-bit", c.Quant.Method, c.Quant.Bits)
	case c.Quant != nil:
		return c.Quant.Method
	case c.MLXQuant != nil:
		return fmt.Sprintf("mlx %d-bit", c.MLXQuant.Bits)
	}
	return strings.ToUpper(map[string]string{"bfloat16": "bf16", "float16": "f16", "float32": "f32"}[c.DType])
}

// Target is what Remove deletes for a name.
type Target struct {
	Name  string
	Where string // "models" or "hub"
	Path  string // the file or folder to delete; for one quantization, the folder holding Files
	// Files, when set, are the only files to delete (one quantization of
	// a folder of GGUF files): in the hub cache the snapshot's links, whose
	// blobs go too when no snapshot links to them any more.
	Files []string
	Size  int64
}

// Find returns what removing name would delete: an entry of the models
// directory (NAME or NAME.gguf), a whole hub cache repository (ORG/NAME),
// or one quantization of a folder of GGUF files (NAME:QUANT or
// ORG/NAME:QUANT, a tag or a file name as Resolve takes them), whose files
// alone go.
func Find(name string, d Dirs) (*Target, error) {
	base, sel, hasSel := strings.Cut(name, ":")
	if hasSel && sel == "" {
		return nil, fmt.Errorf("%q: nothing after the colon (give a quantization such as Q4_K_M, or the whole model)", name)
	}
	var looked []string
	if d.Models != "" && base != "" && !strings.ContainsAny(base, `/\`) && base != "." && base != ".." {
		for _, cand := range []string{base, base + ".gguf"} {
			p := filepath.Join(d.Models, cand)
			st, err := os.Lstat(p)
			if err != nil {
				continue
			}
			if !hasSel {
				return &Target{Name: name, Where: "models", Path: p, Size: duSize(p)}, nil
			}
			if !st.IsDir() {
				return nil, fmt.Errorf("model %q: %s is one file; there is nothing to choose with :%s", name, p, sel)
			}
			return quantTarget(name, "models", p, p, sel)
		}
		looked = append(looked, fmt.Sprintf("%s or %s.gguf in the models directory %s", base, base, d.Models))
	}
	if d.Hub != "" && hub.ValidRepo(base) == nil {
		p := hub.RepoDir(d.Hub, base)
		if _, err := os.Stat(p); err == nil {
			if !hasSel {
				return &Target{Name: name, Where: "hub", Path: p, Size: duSize(p)}, nil
			}
			snap, err := hub.Snapshot(d.Hub, base, "")
			if err != nil {
				return nil, err
			}
			return quantTarget(name, "hub", p, snap, sel)
		}
		looked = append(looked, fmt.Sprintf("%s in the Hugging Face hub cache %s", p, d.Hub))
	}
	if len(looked) == 0 {
		looked = append(looked, "nothing: name a models directory entry (NAME) or a hub repository (ORG/NAME)")
	}
	return nil, &NotFoundError{Name: name, Looked: looked}
}

// quantTarget is the target of the GGUF files sel picks in folder dir (a
// models directory folder, or a hub snapshot of the repository at path).
func quantTarget(name, where, path, dir, sel string) (*Target, error) {
	files, err := hub.SnapshotFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("model %q: reading %s: %w", name, dir, err)
	}
	if !slices.ContainsFunc(files, hub.IsGGUF) {
		return nil, fmt.Errorf("model %q: %s holds no GGUF files to choose from with :%s (remove the whole model without it)", name, dir, sel)
	}
	picked, err := hub.SelectGGUF(files, sel)
	if err != nil {
		return nil, fmt.Errorf("model %q in %s: %w", name, dir, err)
	}
	t := &Target{Name: name, Where: where, Path: path}
	for _, f := range picked {
		p := filepath.Join(dir, filepath.FromSlash(f))
		t.Files = append(t.Files, p)
		if st, err := os.Stat(p); err == nil {
			t.Size += st.Size()
		}
	}
	return t, nil
}

// Remove deletes t: its folder or file, or only its Files. In the hub
// cache, the blobs of removed snapshot links that no snapshot links to any
// more are deleted as well, and folders left empty inside the snapshot.
func Remove(t *Target) error {
	if len(t.Files) == 0 {
		if err := os.RemoveAll(t.Path); err != nil {
			return fmt.Errorf("removing %s: %w", t.Path, err)
		}
		return nil
	}
	var blobs []string
	for _, f := range t.Files {
		if b, err := filepath.EvalSymlinks(f); err == nil && b != f {
			blobs = append(blobs, b)
		}
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("removing %s: %w", f, err)
		}
		// Folders of a split quantization, left empty.
		for dir := filepath.Dir(f); strings.HasPrefix(dir, t.Path+string(filepath.Separator)) && !isSnapshot(dir); dir = filepath.Dir(dir) {
			if os.Remove(dir) != nil {
				break
			}
		}
	}
	if t.Where != "hub" || len(blobs) == 0 {
		return nil
	}
	used, err := linkedBlobs(t.Path)
	if err != nil {
		return err
	}
	blobDir, err := filepath.EvalSymlinks(filepath.Join(t.Path, "blobs"))
	if err != nil {
		return fmt.Errorf("removing the blobs of %s: %w", t.Name, err)
	}
	for _, b := range blobs {
		if used[b] || filepath.Dir(b) != blobDir {
			continue
		}
		if err := os.Remove(b); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing blob %s: %w", b, err)
		}
	}
	return nil
}

// isSnapshot reports whether dir is a hub snapshot folder
// (…/snapshots/COMMIT), which stays even when empty.
func isSnapshot(dir string) bool {
	return filepath.Base(filepath.Dir(dir)) == "snapshots"
}

// linkedBlobs returns the files that the links of every snapshot of the
// hub repository at repo resolve to.
func linkedBlobs(repo string) (map[string]bool, error) {
	used := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(repo, "snapshots"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		if b, err := filepath.EvalSymlinks(p); err == nil {
			used[b] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the snapshots of %s: %w", repo, err)
	}
	return used, nil
}

// duSize adds the sizes of the regular files under p, not following
// symbolic links (a hub repository's blobs count once).
func duSize(p string) int64 {
	var n int64
	filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
