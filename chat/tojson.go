package chat

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// jsonOptions are the arguments of Python's json.dumps that Hugging Face's
// tojson filter passes through.
type jsonOptions struct {
	ensureASCII bool
	indent      string // "" with hasIndent false means no indentation
	hasIndent   bool
	itemSep     string
	keySep      string
	sortKeys    bool
}

// tojsonFilter is the tojson filter of Hugging Face's chat template
// environment:
//
//	tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
//
// which returns json.dumps(x, ...) with those arguments. Arguments may be
// given by position or by keyword.
func tojsonFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: no value to encode")
	}
	params := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	if len(args)-1 > len(params) {
		return jinja.Undefined(), fmt.Errorf("tojson: takes at most %d arguments, got %d", len(params), len(args)-1)
	}
	named := make(map[string]jinja.Value, len(args)-1+len(kwargs))
	for i, a := range args[1:] {
		named[params[i]] = a
	}
	for k, v := range kwargs {
		if !slices.Contains(params, k) {
			return jinja.Undefined(), fmt.Errorf("tojson: unexpected keyword argument %q", k)
		}
		if _, dup := named[k]; dup {
			return jinja.Undefined(), fmt.Errorf("tojson: got multiple values for argument %q", k)
		}
		named[k] = v
	}
	var opts jsonOptions
	if v, ok := named["ensure_ascii"]; ok {
		opts.ensureASCII = v.IsTruthy()
	}
	if v, ok := named["sort_keys"]; ok {
		opts.sortKeys = v.IsTruthy()
	}
	if v, ok := named["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		switch {
		case v.IsInt():
			opts.indent = strings.Repeat(" ", int(max(0, min(v.AsInt(), 256))))
		case v.IsString():
			opts.indent = v.AsString()
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: indent must be an integer or a string, got %s", kindName(v))
		}
		opts.hasIndent = true
	}
	opts.itemSep, opts.keySep = ", ", ": "
	if opts.hasIndent {
		opts.itemSep = ","
	}
	if v, ok := named["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
			return jinja.Undefined(), errors.New("tojson: separators must be a pair of strings")
		}
		opts.itemSep, opts.keySep = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
	}
	var b strings.Builder
	if err := encodeJSON(&b, args[0], &opts, 0); err != nil {
		return jinja.Undefined(), fmt.Errorf("tojson: %w", err)
	}
	return jinja.NewString(b.String()), nil
}

// maxJSONDepth bounds nesting so that a self-referencing value (a template
// can append a list to itself) fails instead of recursing forever.
const maxJSONDepth = 512

// encodeJSON writes v as Python's json.dumps does with the given options.
func encodeJSON(b *strings.Builder, v jinja.Value, o *jsonOptions, depth int) error {
	if depth > maxJSONDepth {
		return errors.New("value nested too deeply (circular reference?)")
	}
	switch {
	case v.IsNone():
		b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloatJSON(v.AsFloat()))
	case v.IsString():
		writeJSONString(b, v.AsString(), o.ensureASCII)
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			o.newline(b, depth+1)
			if err := encodeJSON(b, item, o, depth+1); err != nil {
				return err
			}
		}
		o.newline(b, depth)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := d.Keys
		if o.sortKeys {
			keys = slices.Clone(keys)
			slices.Sort(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			o.newline(b, depth+1)
			writeJSONString(b, k, o.ensureASCII)
			b.WriteString(o.keySep)
			val, _ := d.Get(k)
			if err := encodeJSON(b, val, o, depth+1); err != nil {
				return err
			}
		}
		o.newline(b, depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("object of type %s is not JSON serializable", kindName(v))
	}
	return nil
}

// newline starts a new indented line when indentation is on.
func (o *jsonOptions) newline(b *strings.Builder, depth int) {
	if !o.hasIndent {
		return
	}
	b.WriteByte('\n')
	for range depth {
		b.WriteString(o.indent)
	}
}

// pyFloatJSON formats f as Python's json.dumps does: repr(f) (the shortest
// representation that round-trips, in positional notation with a ".0" for
// integral values when the decimal exponent is in [-4, 16), in scientific
// notation with at least two exponent digits otherwise), and NaN, Infinity,
// -Infinity for the non-finite values.
func pyFloatJSON(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	// Shortest round-trip digits and exponent, e.g. "-1.2345e+06".
	s := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	digits := strings.Replace(mant, ".", "", 1)

	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	if exp < -4 || exp >= 16 {
		b.WriteByte(digits[0])
		if len(digits) > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		b.WriteByte('e')
		if exp < 0 {
			b.WriteByte('-')
			exp = -exp
		} else {
			b.WriteByte('+')
		}
		if exp < 10 {
			b.WriteByte('0')
		}
		b.WriteString(strconv.Itoa(exp))
		return b.String()
	}
	switch {
	case exp < 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -exp-1))
		b.WriteString(digits)
	case exp+1 >= len(digits):
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", exp+1-len(digits)))
		b.WriteString(".0")
	default:
		b.WriteString(digits[:exp+1])
		b.WriteByte('.')
		b.WriteString(digits[exp+1:])
	}
	return b.String()
}

// writeJSONString writes s as a JSON string literal the way Python's
// json.dumps does: '"' and '\\' escaped, \b \f \n \r \t as short escapes,
// other control characters below U+0020 as \u00XX, and, with ensureASCII,
// every non-ASCII character as \uXXXX (astral ones as surrogate pairs).
// Nothing else is escaped: no HTML escaping, and U+2028/U+2029 stay literal.
// The one exception is U+FDD0, a noncharacter, which stays literal even
// with ensureASCII: it is the guard (tokenizer.Guard) that a server puts
// into a client's text to keep added tokens in it from matching, and the
// tokenizer must find it there.
func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	const hex = "0123456789abcdef"
	const guard = "\uFDD0"
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && (c < utf8.RuneSelf || !ensureASCII) {
			i++
			continue
		}
		if c == guard[0] && strings.HasPrefix(s[i:], guard) {
			i += len(guard)
			continue
		}
		b.WriteString(s[start:i])
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			default:
				b.WriteString(`\u00`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		writeU := func(u rune) {
			b.WriteString(`\u`)
			b.WriteByte(hex[u>>12&0xf])
			b.WriteByte(hex[u>>8&0xf])
			b.WriteByte(hex[u>>4&0xf])
			b.WriteByte(hex[u&0xf])
		}
		if r >= 0x10000 {
			r -= 0x10000
			writeU(0xd800 + (r>>10)&0x3ff)
			writeU(0xdc00 + r&0x3ff)
		} else {
			writeU(r)
		}
		i += size
		start = i
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

// kindName names the kind of a template value for error messages.
func kindName(v jinja.Value) string {
	switch {
	case v.IsUndefined():
		return "Undefined"
	case v.IsNone():
		return "NoneType"
	case v.IsBool():
		return "bool"
	case v.IsInt():
		return "int"
	case v.IsFloat():
		return "float"
	case v.IsString():
		return "str"
	case v.IsList():
		return "list"
	case v.IsDict():
		return "dict"
	case v.IsCallable():
		return "function"
	}
	return "unknown"
}
