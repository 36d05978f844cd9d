package hub

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// DefaultQuant is the quantization picked from a GGUF repository when no
// tag is given and the repository offers it.
const DefaultQuant = "Q4_K_M"

// quantName finds a llama.cpp quantization tag in a file name: Q4_K_M,
// Q8_0, IQ4_XS, UD-Q4_K_XL's Q4_K_XL, BF16 …
var quantName = regexp.MustCompile(`(?:^|[^A-Z0-9])(I?Q[1-8]_(?:K(?:_(?:XXL|XL|[SML]))?|[01]|XXS|XS|S|M|NL)|BF16|F16|F32|TQ[12]_0|MXFP4)(?:[.\-_/]|$)`)

// splitPart matches a part of a split GGUF file: -00002-of-00003.gguf.
var splitPart = regexp.MustCompile(`-([0-9]{5})-of-[0-9]{5}\.gguf$`)

// QuantOf returns the quantization tag in a GGUF file's name, in upper
// case, or "" when it names none.
func QuantOf(file string) string {
	m := quantName.FindStringSubmatch(strings.ToUpper(path.Base(file)))
	if m == nil {
		// Split models often keep their parts in a folder named by the tag.
		m = quantName.FindStringSubmatch(strings.ToUpper(file))
	}
	if m == nil {
		return ""
	}
	return m[1]
}

// IsGGUF reports whether a file name ends in .gguf.
func IsGGUF(file string) bool { return strings.HasSuffix(strings.ToLower(file), ".gguf") }

// Quants lists the quantization tags of the GGUF files among files,
// sorted, each once (the file's name for a file whose name has none);
// projector files (mmproj) are left out.
func Quants(files []string) []string {
	var qs []string
	for _, f := range files {
		if !IsGGUF(f) || strings.HasPrefix(strings.ToLower(path.Base(f)), "mmproj") {
			continue
		}
		q := QuantOf(f)
		if q == "" {
			q = path.Base(f)
		}
		if !slices.Contains(qs, q) {
			qs = append(qs, q)
		}
	}
	slices.Sort(qs)
	return qs
}

// SelectGGUF picks GGUF files among files (slash-separated paths): with
// sel a file name (ending in .gguf), that file; with sel a quantization
// tag (Q4_K_M, case does not matter), the files of that tag; with sel
// empty, the only model there is, else DefaultQuant's. Parts of a split
// model come together, the first first. Projector files (mmproj) are
// never picked by tag.
func SelectGGUF(files []string, sel string) ([]string, error) {
	var ggufs []string
	for _, f := range files {
		if IsGGUF(f) && !strings.HasPrefix(strings.ToLower(path.Base(f)), "mmproj") {
			ggufs = append(ggufs, f)
		}
	}
	if len(ggufs) == 0 {
		return nil, fmt.Errorf("no GGUF files")
	}
	if IsGGUF(sel) {
		for _, f := range files {
			if f == sel || path.Base(f) == sel {
				return []string{f}, nil
			}
		}
		return nil, fmt.Errorf("no file %s (GGUF files: %s)", sel, strings.Join(ggufs, ", "))
	}
	byTag := func(tag string) []string {
		var out []string
		for _, f := range ggufs {
			if QuantOf(f) == tag {
				out = append(out, f)
			}
		}
		slices.SortFunc(out, func(a, b string) int { return strings.Compare(splitKey(a), splitKey(b)) })
		return out
	}
	if sel != "" {
		got := byTag(strings.ToUpper(sel))
		if len(got) == 0 {
			return nil, fmt.Errorf("no GGUF file of quantization %s (there are: %s)", sel, strings.Join(Quants(ggufs), ", "))
		}
		return models(got, sel)
	}
	if got, err := models(ggufs, ""); err == nil {
		return got, nil
	}
	if got := byTag(DefaultQuant); len(got) > 0 {
		return models(got, DefaultQuant)
	}
	return nil, fmt.Errorf("several GGUF models and none of %s: name one with :QUANT (there are: %s)", DefaultQuant, strings.Join(Quants(ggufs), ", "))
}

// splitKey orders parts of split files after their prefix.
func splitKey(f string) string {
	if m := splitPart.FindStringSubmatchIndex(f); m != nil {
		return f[:m[0]] + "\x00" + f[m[2]:m[3]]
	}
	return f
}

// models checks that files hold one model (one file, or the parts of one
// split file) and returns them.
func models(files []string, what string) ([]string, error) {
	if len(files) == 1 {
		return files, nil
	}
	prefix := ""
	for _, f := range files {
		m := splitPart.FindStringIndex(f)
		if m == nil {
			prefix = "\x00"
			break
		}
		if prefix == "" {
			prefix = f[:m[0]]
		} else if f[:m[0]] != prefix {
			prefix = "\x00"
			break
		}
	}
	if prefix == "\x00" {
		if what == "" {
			return nil, fmt.Errorf("several GGUF models: %s", strings.Join(files, ", "))
		}
		return nil, fmt.Errorf("several GGUF files of %s: %s; name one as :FILE.gguf", what, strings.Join(files, ", "))
	}
	return files, nil
}
