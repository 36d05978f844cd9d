// Package mmap maps files read-only into memory.
package mmap

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// File is a read-only memory mapping of a whole file.
type File struct {
	Name string
	Data []byte
}

// Open maps the named file read-only. An empty file maps to an empty slice.
func Open(name string) (*File, error) {
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
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", name, err)
	}
	_ = unix.Madvise(data, unix.MADV_WILLNEED)
	return &File{Name: name, Data: data}, nil
}

// Close unmaps the file. Slices of Data must not be used afterwards.
func (m *File) Close() error {
	if m == nil || len(m.Data) == 0 {
		return nil
	}
	err := unix.Munmap(m.Data)
	m.Data = nil
	return err
}
