package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// SingleFile and IndexFile are the file names a Hugging Face model
// directory keeps its weights under: one file, or shards listed by an
// index.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// Dir is the weights of a model directory: either a single
// model.safetensors or the shards that model.safetensors.index.json lists.
type Dir struct {
	path     string
	files    []*File // shards in name order
	where    map[string]*File
	names    []string
	metadata map[string]string
}

// OpenDir opens the weights of the model directory dir. When
// model.safetensors.index.json is present, every shard named in its
// weight_map is opened and every tensor it lists must be in its shard;
// otherwise dir must hold model.safetensors. Close releases all shards.
func OpenDir(dir string) (*Dir, error) { return OpenDirWith(dir, OpenOptions{}) }

// OpenDirWith is OpenDir with options, which apply to every shard.
func OpenDirWith(dir string, opts OpenOptions) (*Dir, error) {
	indexPath := filepath.Join(dir, IndexFile)
	raw, err := os.ReadFile(indexPath)
	switch {
	case err == nil:
		return openSharded(dir, indexPath, raw, opts)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	single := filepath.Join(dir, SingleFile)
	if _, err := os.Stat(single); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("safetensors: %s: neither %s nor %s found", dir, SingleFile, IndexFile)
	}
	f, err := OpenWith(single, opts)
	if err != nil {
		return nil, err
	}
	d := &Dir{path: dir, files: []*File{f}, where: make(map[string]*File), names: f.Names(), metadata: f.Metadata()}
	for _, name := range d.names {
		d.where[name] = f
	}
	return d, nil
}

// shardIndex is the part of model.safetensors.index.json that matters.
type shardIndex struct {
	WeightMap map[string]string `json:"weight_map"`
}

func openSharded(dir, indexPath string, raw []byte, opts OpenOptions) (_ *Dir, err error) {
	var idx shardIndex
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, &FormatError{File: indexPath, Msg: "bad index JSON", Err: err}
	}
	if len(idx.WeightMap) == 0 {
		return nil, &FormatError{File: indexPath, Msg: `"weight_map" is missing or empty`}
	}
	// Group the tensors by shard.
	byShard := make(map[string][]string)
	for _, tensor := range sortedKeys(idx.WeightMap) {
		shard := idx.WeightMap[tensor]
		if shard == "" || !filepath.IsLocal(shard) {
			return nil, &FormatError{File: indexPath, Tensor: tensor, Msg: fmt.Sprintf("shard name %q is not a file inside the model directory", shard)}
		}
		byShard[shard] = append(byShard[shard], tensor)
	}

	d := &Dir{path: dir, where: make(map[string]*File)}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	for _, shard := range sortedKeys(byShard) {
		tensors := byShard[shard]
		path := filepath.Join(dir, shard)
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("safetensors: %s: shard %s (holding tensor %q and %d more) is missing: %w", indexPath, shard, tensors[0], len(tensors)-1, err)
		}
		f, err := OpenWith(path, opts)
		if err != nil {
			return nil, err
		}
		d.files = append(d.files, f)
		if d.metadata == nil {
			d.metadata = f.Metadata()
		}
		for _, tensor := range tensors {
			if _, ok := f.Tensor(tensor); !ok {
				return nil, &FormatError{File: path, Tensor: tensor, Msg: fmt.Sprintf("not in this shard, though %s says it is", IndexFile)}
			}
			d.where[tensor] = f
		}
		// Names in shard order, then file order, keeping only what the
		// index lists.
		for _, name := range f.Names() {
			if d.where[name] == f {
				d.names = append(d.names, name)
			}
		}
	}
	return d, nil
}

// Path returns the directory the weights were opened from.
func (d *Dir) Path() string { return d.path }

// Files returns the open files: one, or every shard in name order.
func (d *Dir) Files() []*File { return d.files }

// Names returns every tensor name: shard by shard in name order, and
// within a shard in the order their data lies in the file.
func (d *Dir) Names() []string { return d.names }

// Tensor returns the named tensor from whichever file holds it.
func (d *Dir) Tensor(name string) (Tensor, bool) {
	f, ok := d.where[name]
	if !ok {
		return Tensor{}, false
	}
	return f.Tensor(name)
}

// Metadata returns the __metadata__ of the first file (for sharded
// checkpoints every shard usually carries the same).
func (d *Dir) Metadata() map[string]string { return d.metadata }

// Close closes every file. Tensor data must not be used afterwards.
func (d *Dir) Close() error {
	var errs []error
	for _, f := range d.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// DirFiles returns the weight files OpenDir opens for dir: the shards
// model.safetensors.index.json names, sorted, else model.safetensors. The
// files are not checked.
func DirFiles(dir string) ([]string, error) {
	indexPath := filepath.Join(dir, IndexFile)
	raw, err := os.ReadFile(indexPath)
	if errors.Is(err, fs.ErrNotExist) {
		return []string{filepath.Join(dir, SingleFile)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var idx shardIndex
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, &FormatError{File: indexPath, Msg: "bad index JSON", Err: err}
	}
	shards := map[string]bool{}
	for _, s := range idx.WeightMap {
		shards[s] = true
	}
	var files []string
	for _, s := range sortedKeys(shards) {
		files = append(files, filepath.Join(dir, s))
	}
	return files, nil
}
