package chat

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// This file prepares template source for the engine. The engine (ardanlabs/
// jinja v1.8.0) has no hooks for filters or whitespace handling, so the
// package adjusts the source it hands over instead, from outside:
//
//   - Whitespace. The engine implements trim_blocks, lstrip_blocks and the
//     "-" markers itself, but applies them to the nearest text even across
//     other tags (so "{% if c %}{{ x }}\n{% endif %}" loses its newline), keeps
//     the template's final newline, keeps "\r\n", and trims inside raw blocks.
//     prepare applies Jinja2's own rules to every text, then writes the
//     result so that the engine's rules find nothing left to change: the
//     markers are dropped, and any leading newlines or line-final indentation
//     a text keeps are written as string literals ({{ "\n" }}), which the
//     engine does not trim. Raw blocks become string literals too.
//   - tojson. The engine resolves filters among its built-ins first and only
//     then among the render data, so "| tojson" is renamed to tojsonName,
//     which Render binds to this package's Python-compatible encoder.
//   - Error lines. The engine reports runtime errors without a line. To find
//     it, a failed render is repeated with an instrumented copy of the
//     template in which each expression first calls markName with its line.

// Names this package binds in the render data. No built-in has them.
const (
	tojsonName = "__lem_tojson"
	markName   = "__lem_line"
)

// tagKind identifies a template tag.
type tagKind uint8

const (
	tagExpr    tagKind = iota // {{ ... }}
	tagStmt                   // {% ... %}
	tagComment                // {# ... #}
	tagRaw                    // {% raw %}...{% endraw %}, as one piece
)

// piece is a run of text or a tag of a template.
type piece struct {
	isTag bool
	text  string // text, or a raw block's body

	kind                tagKind
	content             string // between the markers, trim markers excluded
	trimLeft, trimRight bool   // "-" after the opener / before the closer
	line                int    // 1-based line of the opener
}

// normalizeNewlines turns "\r\n" and "\r" into "\n" and drops one final
// newline, as Jinja2 does with keep_trailing_newline=False.
func normalizeNewlines(src string) string {
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

// endRaw matches the tag that ends a raw block, as Jinja2's lexer does.
var endRaw = regexp.MustCompile(`\{%(-?)\s*endraw\s*(-?)%\}`)

// scan splits src into text and tags the way the engine does: a tag opens
// with "{{", "{%" or "{#", an optional "-" follows, and the tag runs to the
// first closer ("}}", "%}", "#}", optionally preceded by "-") outside quoted
// strings (comments ignore quotes). A raw block becomes one tagRaw piece.
// It returns ok false for an unclosed tag or raw block.
func scan(src string) (pieces []piece, ok bool) {
	line := 1
	textStart := 0
	for i := 0; i < len(src); {
		c := src[i]
		if c != '{' || i+1 >= len(src) {
			if c == '\n' {
				line++
			}
			i++
			continue
		}
		var p piece
		var closer string
		switch src[i+1] {
		case '{':
			p.kind, closer = tagExpr, "}}"
		case '%':
			p.kind, closer = tagStmt, "%}"
		case '#':
			p.kind, closer = tagComment, "#}"
		default:
			i++
			continue
		}
		if i > textStart {
			pieces = append(pieces, piece{text: src[textStart:i]})
		}
		p.isTag, p.line = true, line
		i += 2
		if i < len(src) && src[i] == '-' {
			p.trimLeft = true
			i++
		}
		start := i
		found := false
		for i < len(src) {
			c := src[i]
			if p.kind != tagComment && (c == '\'' || c == '"') {
				i++
				for i < len(src) && src[i] != c {
					if src[i] == '\\' && i+1 < len(src) {
						if src[i+1] == '\n' {
							line++
						}
						i++
					}
					if src[i] == '\n' {
						line++
					}
					i++
				}
				if i < len(src) {
					i++
				}
				continue
			}
			if c == '-' && i+2 < len(src) && src[i+1] == closer[0] && src[i+2] == closer[1] {
				p.content, p.trimRight = src[start:i], true
				i += 3
				found = true
				break
			}
			if c == closer[0] && i+1 < len(src) && src[i+1] == closer[1] {
				p.content = src[start:i]
				i += 2
				found = true
				break
			}
			if c == '\n' {
				line++
			}
			i++
		}
		if !found {
			return pieces, false
		}
		if p.kind == tagStmt && strings.TrimSpace(p.content) == "raw" {
			m := endRaw.FindStringSubmatchIndex(src[i:])
			if m == nil {
				return pieces, false
			}
			// The piece takes its left side from {% raw %} and its
			// right side from {% endraw %}; the inner markers and
			// lstrip_blocks before {% endraw %} trim the body.
			body := src[i : i+m[0]]
			lineStart := false
			if p.trimRight {
				rest := strings.TrimLeftFunc(body, pySpace)
				lineStart = len(rest) < len(body) && body[len(body)-len(rest)-1] == '\n'
				body = rest
			}
			if m[3] > m[2] {
				body = strings.TrimRightFunc(body, pySpace)
			} else {
				body = lstripBlock(body, lineStart)
			}
			p.kind, p.text, p.content = tagRaw, body, ""
			p.trimRight = m[5] > m[4]
			line += strings.Count(src[i:i+m[1]], "\n")
			i += m[1]
		}
		pieces = append(pieces, p)
		textStart = i
	}
	if textStart < len(src) {
		pieces = append(pieces, piece{text: src[textStart:]})
	}
	return pieces, true
}

// pySpace reports whether Python's str.isspace holds for r.
func pySpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// lstripBlock applies lstrip_blocks to text preceding a block tag: the
// whitespace after its last newline is removed, when the tag starts its
// line (lineStart says whether text itself starts a line).
func lstripBlock(text string, lineStart bool) string {
	l := strings.LastIndexByte(text, '\n') + 1
	if l == 0 && !lineStart {
		return text
	}
	rest := text[l:]
	if rest == "" || strings.TrimLeftFunc(rest, pySpace) != "" {
		return text
	}
	return text[:l]
}

// blockLike reports whether trim_blocks and lstrip_blocks apply to a tag.
func (p *piece) blockLike() bool { return p.kind != tagExpr }

// prepare returns the source the engine compiles for src (see the top of
// this file), with expressions instrumented when trace is set. It returns ok
// false when src has an unclosed tag or raw block; the engine reports that.
func prepare(src string, trace bool) (string, bool) {
	pieces, ok := scan(normalizeNewlines(src))
	if !ok {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(src) + len(src)/8)
	for i := range pieces {
		p := &pieces[i]
		if p.isTag {
			writeTag(&b, p, trace)
			continue
		}
		text := p.text
		// The tag before: "-" strips all whitespace, trim_blocks one
		// newline. lineStart records whether what it consumed ended a
		// line, which lets lstrip_blocks act on text without a newline.
		lineStart := true
		if i > 0 {
			prev := &pieces[i-1]
			lineStart = false
			switch {
			case prev.trimRight:
				rest := strings.TrimLeftFunc(text, pySpace)
				lineStart = len(rest) < len(text) && text[len(text)-len(rest)-1] == '\n'
				text = rest
			case prev.blockLike() && strings.HasPrefix(text, "\n"):
				text = text[1:]
				lineStart = true
			}
		}
		// The tag after: "-" strips all whitespace, lstrip_blocks the
		// indentation before a block tag.
		if i+1 < len(pieces) {
			switch next := &pieces[i+1]; {
			case next.trimLeft:
				text = strings.TrimRightFunc(text, pySpace)
			case next.blockLike():
				text = lstripBlock(text, lineStart)
			}
		}
		writeText(&b, text)
	}
	return b.String(), true
}

// writeText writes text so that the engine's own whitespace rules leave it
// alone: those remove a leading newline after a block tag and indentation
// after the last newline before one, so leading newlines and line-final
// spaces and tabs are written as string literals.
func writeText(b *strings.Builder, text string) {
	i := 0
	for i < len(text) && text[i] == '\n' {
		i++
	}
	j := len(text)
	for j > i && (text[j-1] == ' ' || text[j-1] == '\t') {
		j--
	}
	if j < len(text) && j > i && text[j-1] != '\n' {
		j = len(text) // indentation after other text: left alone
	}
	writeLiteral(b, text[:i])
	b.WriteString(text[i:j])
	writeLiteral(b, text[j:])
}

// writeLiteral writes an expression tag printing s.
func writeLiteral(b *strings.Builder, s string) {
	if s == "" {
		return
	}
	b.WriteString(`{{ "`)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteString(`" }}`)
}

// writeTag writes a tag without its trim markers (their effect is already
// applied to the text around it), with tojson renamed and, with trace, its
// expression instrumented. Comments are dropped; raw blocks become literals.
func writeTag(b *strings.Builder, p *piece, trace bool) {
	switch p.kind {
	case tagComment:
		return
	case tagRaw:
		writeLiteral(b, p.text)
		return
	}
	content := p.content
	var edits []edit
	kw := keyword(content)
	if p.kind == tagExpr || kw != "filter" {
		for _, off := range filterUses(content, "tojson") {
			edits = append(edits, edit{at: off, text: "__lem_"})
		}
	}
	if trace {
		if from, to, ok := exprSpan(p, kw); ok {
			edits = append(edits,
				edit{at: from, text: " " + markName + "(" + strconv.Itoa(p.line) + ")("},
				edit{at: to, text: ")"})
		}
	}
	if p.kind == tagExpr {
		b.WriteString("{{")
	} else {
		b.WriteString("{%")
	}
	applyEdits(b, content, edits)
	if p.kind == tagExpr {
		b.WriteString("}}")
	} else {
		b.WriteString("%}")
	}
}

// edit inserts text at an offset.
type edit struct {
	at   int
	text string
}

// applyEdits writes s with the edits applied, in offset order (stable for
// equal offsets).
func applyEdits(b *strings.Builder, s string, edits []edit) {
	for i := 1; i < len(edits); i++ {
		for j := i; j > 0 && edits[j].at < edits[j-1].at; j-- {
			edits[j], edits[j-1] = edits[j-1], edits[j]
		}
	}
	prev := 0
	for _, e := range edits {
		b.WriteString(s[prev:e.at])
		b.WriteString(e.text)
		prev = e.at
	}
	b.WriteString(s[prev:])
}

// exprSpan returns the span of a tag's content holding the expression the
// engine evaluates first:
//
//	{{ x }}                 x
//	{% if c %}, {% elif c %} c
//	{% for a in xs if c %}  xs
//	{% set a = x %}         x
//
// Other tags (macro headers, call and filter blocks, block ends) have none.
func exprSpan(p *piece, kw string) (from, to int, ok bool) {
	content := p.content
	nonBlank := func(from, to int) (int, int, bool) {
		return from, to, strings.TrimSpace(content[from:to]) != ""
	}
	if p.kind == tagExpr {
		return nonBlank(0, len(content))
	}
	after := strings.Index(content, kw) + len(kw)
	switch kw {
	case "if", "elif":
		return nonBlank(after, len(content))
	case "set":
		// The engine splits at the first "=".
		if eq := strings.IndexByte(content[after:], '='); eq >= 0 {
			return nonBlank(after+eq+1, len(content))
		}
	case "for":
		in := findKeyword(content[after:], "in")
		if in < 0 {
			return 0, 0, false
		}
		from := after + in + len("in")
		to := len(content)
		if r := findKeyword(content[from:to], "recursive"); r >= 0 {
			to = from + r
		}
		if f := findKeyword(content[from:to], "if"); f >= 0 {
			to = from + f
		}
		return nonBlank(from, to)
	}
	return 0, 0, false
}

// keyword returns the statement keyword of a {% %} tag's content, as the
// engine reads it (the leading run of letters and underscores).
func keyword(content string) string {
	content = strings.TrimSpace(content)
	for i, r := range content {
		if !unicode.IsLetter(r) && r != '_' {
			return content[:i]
		}
	}
	return content
}

// filterUses returns the offsets in expression text s where the filter name
// appears after a "|", outside string literals.
func filterUses(s, name string) []int {
	var offs []int
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '"':
			i = skipString(s, i)
		case c == '|':
			j := i + 1
			for j < len(s) && isSpace(s[j]) {
				j++
			}
			k := j
			for k < len(s) && isIdentChar(s[k]) {
				k++
			}
			if s[j:k] == name {
				offs = append(offs, j)
			}
		}
	}
	return offs
}

// skipString returns the offset of the closing quote of the string literal
// opening at s[i] (or len(s)-1 when it is unterminated).
func skipString(s string, i int) int {
	q := s[i]
	for i++; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			continue
		}
		if s[i] == q {
			return i
		}
	}
	return len(s) - 1
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isIdentChar(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// findKeyword returns the offset of the first whole-word kw in s outside
// brackets and string literals, or -1, reading s as the engine does.
func findKeyword(s, kw string) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '"':
			i = skipString(s, i)
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ')' || c == ']' || c == '}':
			depth--
		case depth == 0 && strings.HasPrefix(s[i:], kw):
			if (i == 0 || !isIdentChar(s[i-1])) && (i+len(kw) >= len(s) || !isIdentChar(s[i+len(kw)])) {
				return i
			}
		}
	}
	return -1
}

// blockEnds maps each block statement to its closing keyword.
var blockEnds = map[string]string{
	"if":         "endif",
	"for":        "endfor",
	"macro":      "endmacro",
	"call":       "endcall",
	"filter":     "endfilter",
	"generation": "endgeneration",
}

// unclosedLine returns the line of the innermost block statement of src left
// without its closing tag, or 0 if there is none.
func unclosedLine(src string) int {
	pieces, _ := scan(normalizeNewlines(src))
	type open struct {
		end  string
		line int
	}
	var stack []open
	for _, p := range pieces {
		if !p.isTag || p.kind != tagStmt {
			continue
		}
		kw := keyword(p.content)
		if end, ok := blockEnds[kw]; ok {
			stack = append(stack, open{end, p.line})
			continue
		}
		if kw == "set" && !strings.Contains(p.content, "=") {
			stack = append(stack, open{"endset", p.line})
			continue
		}
		if n := len(stack); n > 0 && stack[n-1].end == kw {
			stack = stack[:n-1]
		}
	}
	if len(stack) == 0 {
		return 0
	}
	return stack[len(stack)-1].line
}

// engineLine matches the line number the engine puts in some of its errors.
var engineLine = regexp.MustCompile(`\bline (\d+)\b`)

// lineOf returns the first line number in an engine error message, or 0.
func lineOf(msg string) int {
	m := engineLine.FindStringSubmatch(msg)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return 0
	}
	return n
}
