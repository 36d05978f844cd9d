// Package hub reads and writes the Hugging Face hub's local cache (the
// layout the Hugging Face tools share) and downloads repositories into it
// over the hub's HTTP protocol.
//
// The cache holds one folder per repository, models--ORG--NAME, with
// refs/REV (a file holding the commit a branch or tag pointed at),
// blobs/ETAG (the files' contents, named by the hub's etag: the sha256 of
// large files stored with Git LFS, the Git blob sha1 of the others) and
// snapshots/COMMIT/PATH (relative symbolic links to the blobs).
package hub

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// CacheDir returns the hub cache the Hugging Face tools use:
// $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
// else ~/.cache/huggingface/hub.
func CacheDir() string {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface", "hub")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(".cache", "huggingface", "hub")
	}
	return filepath.Join(home, ".cache", "huggingface", "hub")
}

// ValidRepo reports whether id names a repository as ORG/NAME.
func ValidRepo(id string) error {
	org, name, ok := strings.Cut(id, "/")
	if !ok || org == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("%q: a hub repository is named ORG/NAME", id)
	}
	for _, part := range []string{org, name} {
		if part == "." || part == ".." || strings.HasPrefix(part, "-") {
			return fmt.Errorf("%q: %q is not a valid repository name part", id, part)
		}
		for _, r := range part {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
				return fmt.Errorf("%q: %q is not allowed in a repository name", id, r)
			}
		}
	}
	return nil
}

// RepoDir returns the cache folder of repository id (ORG/NAME).
func RepoDir(cache, id string) string {
	return filepath.Join(cache, "models--"+strings.ReplaceAll(id, "/", "--"))
}

// RepoID turns a cache folder's name back into ORG/NAME, or "" when the
// name is not a model repository's.
func RepoID(dirName string) string {
	rest, ok := strings.CutPrefix(dirName, "models--")
	if !ok {
		return ""
	}
	return strings.Replace(rest, "--", "/", 1)
}

// Snapshot returns the snapshot folder of repository id at rev (a branch,
// tag or commit; "" means main): the commit refs/REV names, or rev itself
// when it is a snapshot's commit, or the only snapshot there is when the
// cache has no refs/main.
func Snapshot(cache, id, rev string) (string, error) {
	dir := RepoDir(cache, id)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("repository %s is not in the hub cache (%s): %w", id, dir, err)
	}
	if rev == "" {
		rev = "main"
	}
	commit := rev
	if b, err := os.ReadFile(filepath.Join(dir, "refs", filepath.FromSlash(rev))); err == nil {
		commit = strings.TrimSpace(string(b))
	}
	snap := filepath.Join(dir, "snapshots", commit)
	if st, err := os.Stat(snap); err == nil && st.IsDir() {
		return snap, nil
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
	if rev == "main" && len(entries) == 1 && entries[0].IsDir() {
		return filepath.Join(dir, "snapshots", entries[0].Name()), nil
	}
	return "", fmt.Errorf("repository %s in the hub cache (%s) has no snapshot for %s (%d snapshots)", id, dir, rev, len(entries))
}

// SnapshotFiles lists the files of a snapshot folder as slash-separated
// paths relative to it, sorted.
func SnapshotFiles(snap string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(snap, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(snap, p)
		if err != nil {
			return err
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	slices.Sort(files)
	return files, err
}

// Repo is a repository in the cache.
type Repo struct {
	ID       string    // ORG/NAME
	Dir      string    // its cache folder
	Size     int64     // bytes of its blobs
	Modified time.Time // latest modification of a blob
	Files    []string  // files of its main snapshot (or only snapshot)
}

// List returns the model repositories in the cache, sorted by ID. A cache
// that does not exist holds none.
func List(cache string) ([]Repo, error) {
	entries, err := os.ReadDir(cache)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the hub cache: %w", err)
	}
	var repos []Repo
	for _, e := range entries {
		id := RepoID(e.Name())
		if id == "" || !e.IsDir() {
			continue
		}
		r := Repo{ID: id, Dir: filepath.Join(cache, e.Name())}
		blobs, _ := os.ReadDir(filepath.Join(r.Dir, "blobs"))
		for _, b := range blobs {
			info, err := b.Info()
			if err != nil || !info.Mode().IsRegular() {
				continue
			}
			r.Size += info.Size()
			if info.ModTime().After(r.Modified) {
				r.Modified = info.ModTime()
			}
		}
		if snap, err := Snapshot(cache, id, ""); err == nil {
			r.Files, _ = SnapshotFiles(snap)
		}
		repos = append(repos, r)
	}
	return repos, nil
}

// Remove deletes repository id from the cache.
func Remove(cache, id string) error {
	if err := ValidRepo(id); err != nil {
		return err
	}
	dir := RepoDir(cache, id)
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("repository %s is not in the hub cache: %w", id, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}
