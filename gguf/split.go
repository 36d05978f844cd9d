package gguf

import (
	"fmt"
	"regexp"
	"strconv"
)

// splitName matches the name of one file of a split model:
// PREFIX-00001-of-00003.gguf.
var splitName = regexp.MustCompile(`^(.*)-([0-9]{5})-of-([0-9]{5})\.gguf$`)

// SplitPath returns the name of file no (0-based) of a model split into
// count files: prefix-00001-of-00003.gguf for no 0 and count 3.
func SplitPath(prefix string, no, count int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, no+1, count)
}

// openSplit opens the other files of the split model that first belongs to
// and merges them into one File. It takes ownership of first.
func openSplit(first *File, count uint64, opts OpenOptions) (_ *File, err error) {
	var opened []*File
	defer func() {
		if err != nil {
			first.Close()
			for _, p := range opened {
				p.Close()
			}
		}
	}()
	m := splitName.FindStringSubmatch(first.Name)
	if m == nil {
		return nil, fmt.Errorf("gguf: %s: %s is %d but the name does not end in -NNNNN-of-%05d.gguf", first.Name, KeySplitCount, count, count)
	}
	prefix := m[1]
	ofN, _ := strconv.Atoi(m[3])
	if uint64(ofN) != count {
		return nil, fmt.Errorf("gguf: %s: %s is %d but the name says %d files", first.Name, KeySplitCount, count, ofN)
	}
	no, ok := first.Uint(KeySplitNo)
	if !ok || no >= count {
		return nil, fmt.Errorf("gguf: %s: %s is missing or not below %s (%d)", first.Name, KeySplitNo, KeySplitCount, count)
	}

	files := make([]*File, count)
	for i := range files {
		if uint64(i) == no {
			files[i] = first
			continue
		}
		p, err := openOne(SplitPath(prefix, i, int(count)), opts)
		if err != nil {
			return nil, fmt.Errorf("gguf: opening file %d of split model %s: %w", i+1, first.Name, err)
		}
		opened = append(opened, p)
		files[i] = p
	}
	return mergeSplit(files)
}

// mergeSplit presents the files of a split model, in order, as one File
// with the metadata of the first and the tensors of all.
func mergeSplit(files []*File) (*File, error) {
	p0 := files[0]
	f := &File{
		Name:       p0.Name,
		Version:    p0.Version,
		Alignment:  p0.Alignment,
		KV:         p0.KV,
		DataOffset: p0.DataOffset,
		kvIndex:    p0.kvIndex,
		tIndex:     make(map[string]int),
	}
	count := uint64(len(files))
	for i, p := range files {
		if no, ok := p.Uint(KeySplitNo); !ok || no != uint64(i) {
			return nil, fmt.Errorf("gguf: %s: file %d of the split model has %s %v, want %d", p.Name, i+1, KeySplitNo, valueOrMissing(p, KeySplitNo), i)
		}
		if c, ok := p.Uint(KeySplitCount); !ok || c != count {
			return nil, fmt.Errorf("gguf: %s: %s is %v, want %d", p.Name, KeySplitCount, valueOrMissing(p, KeySplitCount), count)
		}
		for _, t := range p.Tensors {
			if j, dup := f.tIndex[t.Name]; dup {
				return nil, fmt.Errorf("gguf: %s: tensor %s is also in file %d of the split model", p.Name, t.Name, f.Tensors[j].Split+1)
			}
			t.Split = i
			f.tIndex[t.Name] = len(f.Tensors)
			f.Tensors = append(f.Tensors, t)
		}
		f.parts = append(f.parts, p.parts[0])
	}
	if n, ok := p0.Uint(KeySplitTensors); ok && n != uint64(len(f.Tensors)) {
		return nil, fmt.Errorf("gguf: %s: %s is %d but the %d files hold %d tensors", p0.Name, KeySplitTensors, n, len(files), len(f.Tensors))
	}
	return f, nil
}

func valueOrMissing(f *File, key string) string {
	if v, ok := f.Value(key); ok {
		return v.String()
	}
	return "missing"
}

// SplitFiles returns the files a model whose first (or any) file is name
// is made of: every part, in order, when name ends in -NNNNN-of-NNNNN.gguf,
// else name alone. The files need not exist.
func SplitFiles(name string) []string {
	m := splitName.FindStringSubmatch(name)
	if m == nil {
		return []string{name}
	}
	n, _ := strconv.Atoi(m[3])
	if n < 1 {
		return []string{name}
	}
	files := make([]string, n)
	for i := range files {
		files[i] = SplitPath(m[1], i, n)
	}
	return files
}
