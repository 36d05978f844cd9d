// Package mmap maps files read-only into memory.
package mmap

import (
	"fmt"
	"io"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// File is a read-only memory mapping of a whole file.
type File struct {
	Name string
	Data []byte
}

// Options configure OpenWith.
type Options struct {
	// NoMmap reads the file into anonymous memory (see readAnon) instead
	// of mapping it: lem's --no-mmap.
	NoMmap bool
	// Read, when set, is told of each chunk that NoMmap's reading adds, in
	// bytes, as it goes.
	Read func(n int64)
}

// Open maps the named file read-only. An empty file maps to an empty slice.
func Open(name string) (*File, error) { return OpenWith(name, Options{}) }

// OpenWith is Open with options: with opts.NoMmap it reads the file into
// anonymous memory instead of mapping it.
func OpenWith(name string, opts Options) (*File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size == 0 {
		return &File{Name: name, Data: []byte{}}, nil
	}
	if int64(int(size)) != size {
		return nil, fmt.Errorf("mmap %s: file too large (%d bytes)", name, size)
	}
	if opts.NoMmap {
		return readAnon(f, name, int(size), opts.Read)
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", name, err)
	}
	_ = unix.Madvise(data, unix.MADV_WILLNEED)
	mapped.add(data)
	return &File{Name: name, Data: data}, nil
}

// Close unmaps the file. Slices of Data must not be used afterwards.
func (m *File) Close() error {
	if m == nil || len(m.Data) == 0 {
		return nil
	}
	mapped.remove(m.Data)
	err := unix.Munmap(m.Data)
	m.Data = nil
	return err
}

// mapped is the set of file mappings made by Open.
var mapped mappings

type mappings struct {
	mu     sync.Mutex
	ranges map[uintptr]uintptr // start → end
}

func (m *mappings) add(b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ranges == nil {
		m.ranges = map[uintptr]uintptr{}
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	m.ranges[p] = p + uintptr(len(b))
}

func (m *mappings) remove(b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.ranges, uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// contains reports whether b lies inside one file mapping.
func (m *mappings) contains(b []byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for lo, hi := range m.ranges {
		if p >= lo && p+uintptr(len(b)) <= hi {
			return true
		}
	}
	return false
}

// Release gives back to the kernel the pages wholly inside b when b lies in
// a file mapping made by Open, for data a caller has copied elsewhere and
// will not read again soon: the pages leave the resident set, and reading
// them later pages them back in from the file. Other memory (anonymous,
// the Go heap) is left alone. Release reports whether it released pages.
func Release(b []byte) bool {
	if len(b) == 0 || !mapped.contains(b) {
		return false
	}
	ps := uintptr(os.Getpagesize())
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (p + ps - 1) &^ (ps - 1)
	hi := (p + uintptr(len(b))) &^ (ps - 1)
	if hi <= lo {
		return false
	}
	return unix.Madvise(b[lo-p:hi-p], unix.MADV_DONTNEED) == nil
}

// Anon returns size bytes of zeroed anonymous memory backed by transparent
// huge pages where the kernel allows (the memory readAnon loads weights
// into), for buffers that must stream like weights do, such as the
// bandwidth baselines of benchmarks. Release it with Free.
func Anon(size int) ([]byte, error) {
	data, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("anonymous memory of %d bytes: %w", size, err)
	}
	_ = unix.Madvise(data, unix.MADV_HUGEPAGE)
	return data, nil
}

// Free releases memory from Anon.
func Free(data []byte) error { return unix.Munmap(data) }

// readChunk is how much readAnon reads between reports.
const readChunk = 16 << 20

// readAnon reads the file into anonymous memory backed by transparent huge
// pages where the kernel allows, instead of mapping it: weights then stream
// through 2 MiB pages, which hardware prefetchers cross without stopping.
// With read set, it reads in chunks and reports each.
func readAnon(f *os.File, name string, size int, read func(n int64)) (*File, error) {
	data, err := Anon(size)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	chunk := size
	if read != nil {
		chunk = readChunk
	}
	for off := 0; off < size; off += chunk {
		end := min(off+chunk, size)
		if _, err := io.ReadFull(f, data[off:end]); err != nil {
			unix.Munmap(data)
			return nil, fmt.Errorf("read %s at byte %d: %w", name, off, err)
		}
		if read != nil {
			read(int64(end - off))
		}
	}
	return &File{Name: name, Data: data}, nil
}
