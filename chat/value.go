package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"

	"github.com/ardanlabs/jinja"
)

// jsonValue decodes JSON into a template value, keeping the key order of
// objects (Go maps would lose it). Numbers without a fraction or exponent
// become integers, as in Python's json.loads; integers beyond int64 become
// floats.
func jsonValue(data []byte) (jinja.Value, error) {
	if !json.Valid(data) {
		// Let encoding/json describe what is wrong.
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			return jinja.Undefined(), err
		}
		return jinja.Undefined(), errors.New("invalid JSON")
	}
	d := jsonDecoder{data: data}
	return d.value()
}

// jsonDecoder walks JSON already checked by json.Valid.
type jsonDecoder struct {
	data    []byte
	pos     int
	members []member // object members being collected
}

type member struct {
	key string
	val jinja.Value
}

// newDict returns an empty dict value with room for n keys.
func newDict(n int) (jinja.Value, *jinja.Dict) {
	v := jinja.NewDict()
	d := v.AsDict()
	d.Keys = make([]string, 0, n)
	if n > 8 {
		d.Data = make(map[string]jinja.Value, n)
	}
	return v, d
}

func (d *jsonDecoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *jsonDecoder) value() (jinja.Value, error) {
	d.skipSpace()
	switch c := d.data[d.pos]; {
	case c == '{':
		d.pos++
		// Collect the members on a stack shared by all levels, then
		// build the dict at its final size.
		base := len(d.members)
		for {
			d.skipSpace()
			if d.data[d.pos] == '}' {
				d.pos++
				break
			}
			if d.data[d.pos] == ',' {
				d.pos++
				d.skipSpace()
			}
			key, err := d.str()
			if err != nil {
				return jinja.Undefined(), err
			}
			d.skipSpace()
			d.pos++ // ':'
			val, err := d.value()
			if err != nil {
				return jinja.Undefined(), err
			}
			d.members = append(d.members, member{key, val})
		}
		v, dict := newDict(len(d.members) - base)
		for _, m := range d.members[base:] {
			dict.Set(m.key, m.val)
		}
		clear(d.members[base:])
		d.members = d.members[:base]
		return v, nil
	case c == '[':
		d.pos++
		var items []jinja.Value
		for {
			d.skipSpace()
			if d.data[d.pos] == ']' {
				d.pos++
				return jinja.NewList(items), nil
			}
			if d.data[d.pos] == ',' {
				d.pos++
			}
			val, err := d.value()
			if err != nil {
				return jinja.Undefined(), err
			}
			items = append(items, val)
		}
	case c == '"':
		s, err := d.str()
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewString(s), nil
	case c == 't':
		d.pos += len("true")
		return jinja.NewBool(true), nil
	case c == 'f':
		d.pos += len("false")
		return jinja.NewBool(false), nil
	case c == 'n':
		d.pos += len("null")
		return jinja.None(), nil
	default:
		start := d.pos
		isFloat := false
		for d.pos < len(d.data) {
			c := d.data[d.pos]
			if c == '.' || c == 'e' || c == 'E' {
				isFloat = true
			} else if c != '-' && c != '+' && (c < '0' || c > '9') {
				break
			}
			d.pos++
		}
		return numberValue(string(d.data[start:d.pos]), isFloat)
	}
}

// numberValue converts a JSON number to an integer or float value.
func numberValue(s string, isFloat bool) (jinja.Value, error) {
	if !isFloat {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return jinja.NewInt(n), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return jinja.Undefined(), fmt.Errorf("number %s: %w", s, err)
	}
	return jinja.NewFloat(f), nil
}

// str reads a string literal at d.pos.
func (d *jsonDecoder) str() (string, error) {
	start := d.pos
	d.pos++
	escaped := false
	for {
		c := d.data[d.pos]
		if c == '\\' {
			escaped = true
			d.pos += 2
			continue
		}
		d.pos++
		if c == '"' {
			break
		}
	}
	if !escaped {
		return string(d.data[start+1 : d.pos-1]), nil
	}
	var s string
	if err := json.Unmarshal(d.data[start:d.pos], &s); err != nil {
		return "", err
	}
	return s, nil
}

// goValue converts a Go value given as a kwarg to a template value.
func goValue(v any) (jinja.Value, error) {
	switch v := v.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(v), nil
	case string:
		return jinja.NewString(v), nil
	case int:
		return jinja.NewInt(int64(v)), nil
	case int8:
		return jinja.NewInt(int64(v)), nil
	case int16:
		return jinja.NewInt(int64(v)), nil
	case int32:
		return jinja.NewInt(int64(v)), nil
	case int64:
		return jinja.NewInt(v), nil
	case uint:
		return uintValue(uint64(v)), nil
	case uint8:
		return jinja.NewInt(int64(v)), nil
	case uint16:
		return jinja.NewInt(int64(v)), nil
	case uint32:
		return jinja.NewInt(int64(v)), nil
	case uint64:
		return uintValue(v), nil
	case float32:
		return jinja.NewFloat(float64(v)), nil
	case float64:
		return jinja.NewFloat(v), nil
	case json.Number:
		return numberValue(string(v), !isJSONInteger(string(v)))
	case json.RawMessage:
		return jsonValue(v)
	case []any:
		items := make([]jinja.Value, len(v))
		for i, item := range v {
			val, err := goValue(item)
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("[%d]: %w", i, err)
			}
			items[i] = val
		}
		return jinja.NewList(items), nil
	case map[string]any:
		d := jinja.NewDict()
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			val, err := goValue(v[k])
			if err != nil {
				return jinja.Undefined(), fmt.Errorf("[%q]: %w", k, err)
			}
			d.AsDict().Set(k, val)
		}
		return d, nil
	case []string:
		items := make([]jinja.Value, len(v))
		for i, s := range v {
			items[i] = jinja.NewString(s)
		}
		return jinja.NewList(items), nil
	}
	return jinja.Undefined(), fmt.Errorf("unsupported type %s", reflect.TypeOf(v))
}

// uintValue converts an unsigned integer, as a float when beyond int64.
func uintValue(u uint64) jinja.Value {
	if u > math.MaxInt64 {
		return jinja.NewFloat(float64(u))
	}
	return jinja.NewInt(int64(u))
}

// isJSONInteger reports whether a JSON number has no fraction or exponent.
func isJSONInteger(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}
