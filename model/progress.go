package model

import "os"

// Progress is told how far loading has come: done of total bytes. Calls
// come from the loading goroutine, done never decreases, and the last call
// has done equal to total.
type Progress func(done, total int64)

// ReadProgress returns a function for the Read option of safetensors and
// gguf (the bytes --no-mmap's reading adds) that reports to progress the
// reading of files, and the files' total size. It reports 0 of the total
// at once.
func ReadProgress(progress Progress, files []string) (read func(n int64), total int64) {
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			total += st.Size()
		}
	}
	var done int64
	progress(0, total)
	return func(n int64) {
		done += n
		progress(min(done, total), total)
	}, total
}

// report tells the read log's progress that the tensors fetched so far,
// but the last, are on the backend.
func (r *readLog) report() {
	if r.progress != nil {
		r.progress(min(r.done, r.total), r.total)
	}
}
