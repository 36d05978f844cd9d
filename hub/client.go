package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// DefaultEndpoint is the Hugging Face hub.
const DefaultEndpoint = "https://huggingface.co"

// Client downloads repositories from the hub into the cache.
type Client struct {
	Endpoint string       // the hub's base URL (NewClient: $HF_ENDPOINT or DefaultEndpoint)
	Token    string       // bearer token, sent to Endpoint's host only (NewClient: $HF_TOKEN)
	Cache    string       // the cache folder (NewClient: CacheDir())
	HTTP     *http.Client // nil: a client without a timeout that follows redirects
	// Progress, when set, is called as bytes of a file arrive.
	Progress func(Progress)
}

// Progress is the state of one file's download.
type Progress struct {
	File        string
	Done, Total int64
	Index, N    int // the file's number (1-based) and the files to fetch
}

// NewClient returns a client configured from the environment: HF_ENDPOINT,
// HF_TOKEN (else the token file huggingface-cli login writes, in $HF_HOME
// or ~/.cache/huggingface) and the cache of CacheDir.
func NewClient() *Client {
	c := &Client{Endpoint: DefaultEndpoint, Token: os.Getenv("HF_TOKEN"), Cache: CacheDir()}
	if e := os.Getenv("HF_ENDPOINT"); e != "" {
		c.Endpoint = e
	}
	if c.Token == "" {
		tokenFile := os.Getenv("HF_TOKEN_PATH")
		if tokenFile == "" {
			home := os.Getenv("HF_HOME")
			if home == "" {
				if h, err := os.UserHomeDir(); err == nil {
					home = filepath.Join(h, ".cache", "huggingface")
				}
			}
			tokenFile = filepath.Join(home, "token")
		}
		if b, err := os.ReadFile(tokenFile); err == nil {
			c.Token = strings.TrimSpace(string(b))
		}
	}
	return c
}

// File is a file of a repository as the hub's tree API lists it.
type File struct {
	Type string `json:"type"` // "file" or "directory"
	Path string `json:"path"`
	Size int64  `json:"size"`
	OID  string `json:"oid"` // Git blob sha1
	LFS  *struct {
		OID  string `json:"oid"` // sha256 of the contents
		Size int64  `json:"size"`
	} `json:"lfs,omitempty"`
}

// ETag returns the file's etag on the hub, which names its blob in the
// cache: the sha256 of an LFS file, the Git blob sha1 of another.
func (f File) ETag() string {
	if f.LFS != nil {
		return f.LFS.OID
	}
	return f.OID
}

// StatusError is an HTTP error answer of the hub.
type StatusError struct {
	URL    string
	Status int
	Msg    string // the hub's explanation, or ours
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s: %d %s: %s", e.URL, e.Status, http.StatusText(e.Status), e.Msg)
}

func (c *Client) httpClient() *http.Client {
	base := c.HTTP
	if base == nil {
		base = &http.Client{}
	}
	hc := *base
	endpoint, _ := url.Parse(c.Endpoint)
	hc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		// The token is for the hub; the content store on another host
		// gets a signed URL instead.
		if endpoint == nil || req.URL.Host != endpoint.Host {
			req.Header.Del("Authorization")
		}
		return nil
	}
	return &hc
}

func (c *Client) newRequest(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "lem")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	return req, nil
}

// statusError explains a failed answer.
func (c *Client) statusError(resp *http.Response, repo string) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var hubErr struct {
		Error string `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &hubErr) == nil && hubErr.Error != "" {
		msg = hubErr.Error
	}
	if m := resp.Header.Get("X-Error-Message"); m != "" {
		msg = m
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized && c.Token == "":
		msg = fmt.Sprintf("%s is gated, private or does not exist: set HF_TOKEN to a token that has access (%s)", repo, msg)
	case resp.StatusCode == http.StatusUnauthorized:
		msg = fmt.Sprintf("the token in HF_TOKEN was refused or %s does not exist (%s)", repo, msg)
	case resp.StatusCode == http.StatusForbidden:
		msg = fmt.Sprintf("no access to %s: accept its conditions at %s/%s with the account of HF_TOKEN (%s)", repo, strings.TrimSuffix(c.Endpoint, "/"), repo, msg)
	case resp.StatusCode == http.StatusNotFound:
		msg = fmt.Sprintf("%s or the file does not exist (%s)", repo, msg)
	}
	return &StatusError{URL: resp.Request.URL.Redacted(), Status: resp.StatusCode, Msg: msg}
}

func (c *Client) getJSON(ctx context.Context, u, repo string, v any) (http.Header, error) {
	req, err := c.newRequest(ctx, "GET", u)
	if err != nil {
		return nil, err
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, c.statusError(resp, repo)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return nil, fmt.Errorf("%s: reading the answer: %w", u, err)
	}
	return resp.Header, nil
}

func (c *Client) apiURL(repo, what, rev string) string {
	return fmt.Sprintf("%s/api/models/%s/%s/%s", strings.TrimSuffix(c.Endpoint, "/"), repo, what, url.PathEscape(rev))
}

// Commit returns the commit that rev (a branch, tag or commit) of repo
// names on the hub.
func (c *Client) Commit(ctx context.Context, repo, rev string) (string, error) {
	var info struct {
		SHA string `json:"sha"`
	}
	if _, err := c.getJSON(ctx, c.apiURL(repo, "revision", rev), repo, &info); err != nil {
		return "", err
	}
	if !isCommit(info.SHA) {
		return "", fmt.Errorf("%s at %s: the hub answered no commit (%q)", repo, rev, info.SHA)
	}
	return info.SHA, nil
}

var nextLink = regexp.MustCompile(`<([^>]+)>;\s*rel="next"`)

// Files lists the files of repo at commit, following the pages of the
// tree API.
func (c *Client) Files(ctx context.Context, repo, commit string) ([]File, error) {
	u := c.apiURL(repo, "tree", commit) + "?recursive=true"
	var files []File
	for pages := 0; u != ""; pages++ {
		if pages > 1000 {
			return nil, fmt.Errorf("%s: more than 1000 pages of files", repo)
		}
		var page []File
		h, err := c.getJSON(ctx, u, repo, &page)
		if err != nil {
			return nil, err
		}
		for _, f := range page {
			if f.Type == "file" || f.Type == "" {
				files = append(files, f)
			}
		}
		u = ""
		if m := nextLink.FindStringSubmatch(h.Get("Link")); m != nil {
			u = m[1]
		}
	}
	return files, nil
}

func isCommit(s string) bool {
	if len(s) != 40 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// safeRelPath checks that a file path from the hub stays inside a
// snapshot folder.
func safeRelPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.Contains(p, "\x00") {
		return fmt.Errorf("file path %q from the hub is not a relative path", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("file path %q from the hub is not a plain relative path", p)
		}
	}
	return nil
}

// unquoteETag strips an etag's quotes and weak mark.
func unquoteETag(s string) string {
	return strings.Trim(strings.TrimPrefix(strings.TrimSpace(s), "W/"), `"`)
}

// Download fetches file f of repo at commit into the cache, resuming a
// download that stopped part way, verifies its checksum (sha256 for LFS
// files, the Git blob sha1 for others) and links it into the snapshot.
// It returns the file's path in the snapshot. index and n number the file
// among those being fetched, for Progress.
func (c *Client) Download(ctx context.Context, repo, commit string, f File, index, n int) (string, error) {
	if err := safeRelPath(f.Path); err != nil {
		return "", err
	}
	etag := f.ETag()
	if etag == "" || strings.ContainsAny(etag, `/\.`) {
		return "", fmt.Errorf("%s: the hub gives no usable checksum (%q)", f.Path, etag)
	}
	size := f.Size
	if f.LFS != nil {
		size = f.LFS.Size
	}
	dir := RepoDir(c.Cache, repo)
	blob := filepath.Join(dir, "blobs", etag)
	link := filepath.Join(dir, "snapshots", commit, filepath.FromSlash(f.Path))
	if st, err := os.Stat(blob); err != nil || st.Size() != size {
		if err := c.fetchBlob(ctx, repo, commit, f, etag, size, blob, index, n); err != nil {
			return "", err
		}
	} else if c.Progress != nil {
		c.Progress(Progress{File: f.Path, Done: size, Total: size, Index: index, N: n})
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return "", err
	}
	rel, err := filepath.Rel(filepath.Dir(link), blob)
	if err != nil {
		return "", err
	}
	os.Remove(link)
	if err := os.Symlink(rel, link); err != nil {
		return "", fmt.Errorf("linking %s into the snapshot: %w", f.Path, err)
	}
	return link, nil
}

// fetchBlob downloads a file to blob, through blob.incomplete.
func (c *Client) fetchBlob(ctx context.Context, repo, commit string, f File, etag string, size int64, blob string, index, n int) error {
	if err := os.MkdirAll(filepath.Dir(blob), 0o755); err != nil {
		return err
	}
	part := blob + ".incomplete"
	out, err := os.OpenFile(part, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	var h hash.Hash
	lfs := f.LFS != nil
	newHash := func() {
		if lfs {
			h = sha256.New()
		} else {
			h = sha1.New()
			fmt.Fprintf(h, "blob %d\x00", size)
		}
	}
	newHash()
	// What an earlier download left is hashed again, then continued.
	have, err := io.Copy(h, out)
	if err != nil {
		return fmt.Errorf("reading %s: %w", part, err)
	}
	if have > size {
		have = 0
	}
	if have == 0 {
		if err := out.Truncate(0); err != nil {
			return err
		}
		out.Seek(0, io.SeekStart)
		newHash()
	}
	u := fmt.Sprintf("%s/%s/resolve/%s/%s", strings.TrimSuffix(c.Endpoint, "/"), repo, commit, escapePath(f.Path))
	if have < size {
		req, err := c.newRequest(ctx, "GET", u)
		if err != nil {
			return err
		}
		if have > 0 {
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
		}
		resp, err := c.httpClient().Do(req)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		defer resp.Body.Close()
		// The hub's answer, before any redirect, carries the etag.
		first := resp
		for first.Request.Response != nil {
			first = first.Request.Response
		}
		got := unquoteETag(first.Header.Get("X-Linked-Etag"))
		if got == "" {
			got = unquoteETag(first.Header.Get("ETag"))
		}
		switch resp.StatusCode {
		case http.StatusOK:
			if have > 0 {
				have = 0
				if err := out.Truncate(0); err != nil {
					return err
				}
				newHash()
			}
		case http.StatusPartialContent:
			var start int64 = -1
			fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-", &start)
			if start != have {
				return fmt.Errorf("%s: asked for bytes from %d, got %q", f.Path, have, resp.Header.Get("Content-Range"))
			}
		default:
			return c.statusError(resp, repo)
		}
		if got != "" && got != etag {
			return fmt.Errorf("%s: the hub's etag %s differs from the listing's %s", f.Path, got, etag)
		}
		if _, err := out.Seek(have, io.SeekStart); err != nil {
			return err
		}
		pw := &progressWriter{c: c, p: Progress{File: f.Path, Done: have, Total: size, Index: index, N: n}}
		if _, err := io.Copy(io.MultiWriter(out, h, pw), resp.Body); err != nil {
			return fmt.Errorf("%s: download stopped at %s; run again to resume: %w", f.Path, strconv.FormatInt(pw.p.Done, 10), err)
		}
		have = pw.p.Done
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if have != size || sum != etag {
		out.Close()
		os.Remove(part)
		kind := "git blob sha1"
		if lfs {
			kind = "sha256"
		}
		return fmt.Errorf("%s: checksum mismatch: %d bytes with %s %s, want %d bytes with %s (the download was discarded)", f.Path, have, kind, sum, size, etag)
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(part, blob)
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

type progressWriter struct {
	c *Client
	p Progress
}

func (w *progressWriter) Write(b []byte) (int, error) {
	w.p.Done += int64(len(b))
	if w.c.Progress != nil {
		w.c.Progress(w.p)
	}
	return len(b), nil
}

// Pulled is what Pull fetched.
type Pulled struct {
	Repo, Commit string
	Snapshot     string   // the snapshot folder
	Files        []File   // the files fetched
	Path         string   // what to open: the snapshot folder, or the (first) GGUF file
	Quants       []string // the quantizations a GGUF repository offers
	Quant        string   // the one fetched
}

// Pull fetches from repo at rev ("" is main) what lem needs to run it
// (see Choose) and records rev's commit in refs/REV.
func (c *Client) Pull(ctx context.Context, repo, sel, rev string) (*Pulled, error) {
	if err := ValidRepo(repo); err != nil {
		return nil, err
	}
	if rev == "" {
		rev = "main"
	}
	commit, err := c.Commit(ctx, repo, rev)
	if err != nil {
		return nil, err
	}
	all, err := c.Files(ctx, repo, commit)
	if err != nil {
		return nil, err
	}
	files, err := Choose(all, sel)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", repo, err)
	}
	res := &Pulled{Repo: repo, Commit: commit, Files: files, Snapshot: filepath.Join(RepoDir(c.Cache, repo), "snapshots", commit)}
	res.Path = res.Snapshot
	var names []string
	for _, f := range all {
		names = append(names, f.Path)
	}
	res.Quants = Quants(names)
	for i, f := range files {
		p, err := c.Download(ctx, repo, commit, f, i+1, len(files))
		if err != nil {
			return nil, err
		}
		if i == 0 && IsGGUF(f.Path) {
			res.Path, res.Quant = p, QuantOf(f.Path)
		}
	}
	refs := filepath.Join(RepoDir(c.Cache, repo), "refs", filepath.FromSlash(rev))
	if !isCommit(rev) && safeRelPath(rev) == nil {
		if err := os.MkdirAll(filepath.Dir(refs), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(refs, []byte(commit), 0o644); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// runFiles are the files of a safetensors repository lem reads, besides
// the weights.
var runFiles = map[string]bool{
	"config.json": true, "generation_config.json": true, "tokenizer.json": true, "tokenizer_config.json": true,
	"special_tokens_map.json": true, "tokenizer.model": true, "vocab.json": true, "merges.txt": true,
	"vocab.txt": true, "added_tokens.json": true, "chat_template.json": true, "chat_template.jinja": true,
	"preprocessor_config.json": true,
	// sentence-transformers
	"modules.json": true, "config_sentence_transformers.json": true, "sentence_bert_config.json": true,
}

// sentenceModule matches the files of a sentence-transformers module
// folder: 1_Pooling/config.json, 2_Dense/model.safetensors …
var sentenceModule = regexp.MustCompile(`^[0-9]+_[A-Za-z]+/[^/]+\.(json|safetensors)$`)

// Choose picks the files to fetch from a repository's listing: for a
// repository of GGUF files, those SelectGGUF picks with sel; for a
// safetensors repository (sel must be empty), the configuration,
// tokenizer and chat template files, the weights and their index, and
// the sentence-transformers module files.
func Choose(files []File, sel string) ([]File, error) {
	byPath := map[string]File{}
	var names []string
	hasGGUF := false
	for _, f := range files {
		byPath[f.Path] = f
		names = append(names, f.Path)
		hasGGUF = hasGGUF || IsGGUF(f.Path)
	}
	var out []File
	if hasGGUF {
		picked, err := SelectGGUF(names, sel)
		if err != nil {
			return nil, err
		}
		for _, p := range picked {
			out = append(out, byPath[p])
		}
		return out, nil
	}
	if sel != "" {
		return nil, fmt.Errorf("%q: the repository has no GGUF files to choose from", sel)
	}
	weights := false
	for _, f := range files {
		base := path.Base(f.Path)
		top := !strings.Contains(f.Path, "/")
		switch {
		case top && runFiles[base], top && strings.HasSuffix(base, ".jinja"),
			top && strings.HasSuffix(base, ".safetensors.index.json"), sentenceModule.MatchString(f.Path):
		case top && strings.HasSuffix(base, ".safetensors"):
			weights = true
		default:
			continue
		}
		out = append(out, f)
	}
	if !weights {
		return nil, errors.New("neither GGUF nor safetensors files: lem cannot run this repository")
	}
	return out, nil
}
