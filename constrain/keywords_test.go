package constrain

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSchemaKeywords checks each keyword that narrows a string, a number
// or an array: values it allows are accepted whole, and values it does not
// are refused at the first byte that rules them out (prefix false) or at
// the end (complete false).
func TestSchemaKeywords(t *testing.T) {
	const (
		lens    = `{"type":"string","minLength":2,"maxLength":4}`
		items   = `{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2}`
		intB    = `{"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991}`
		pct     = `{"type":"integer","minimum":0,"exclusiveMaximum":100}`
		mul     = `{"type":"integer","multipleOf":5,"minimum":10}`
		neg     = `{"type":"integer","exclusiveMinimum":-3.5,"maximum":-1}`
		numB    = `{"type":"number","minimum":0,"maximum":1}`
		numEx   = `{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":2}`
		dec     = `{"type":"number","exclusiveMinimum":0.5,"maximum":2.25}`
		decNeg  = `{"type":"number","minimum":-1.5,"maximum":-0.25}`
		date    = `{"type":"string","format":"date"}`
		dt      = `{"type":"string","format":"date-time"}`
		tm      = `{"type":"string","format":"time"}`
		email   = `{"type":"string","format":"email"}`
		uuid    = `{"type":"string","format":"uuid"}`
		ipv4    = `{"type":"string","format":"ipv4"}`
		uri     = `{"type":"string","format":"uri"}`
		code    = `{"type":"string","pattern":"^[A-Z]{3}-[0-9]+$"}`
		search  = `{"type":"string","pattern":"ab+c"}`
		patLen  = `{"type":"string","pattern":"^x*$","minLength":2,"maxLength":3}`
		unicode = `{"type":"string","maxLength":2}`
	)
	for _, tc := range []struct {
		schema           string
		text             string
		prefix, complete bool
	}{
		{lens, `"ab"`, true, true},
		{lens, `"abcd"`, true, true},
		{lens, `"a"`, false, false},
		{lens, `"abcde`, false, false},
		{lens, `"\n\t"`, true, true},
		{lens, `"\u00e9\u00e9\u00e9\u00e9"`, true, true},
		{lens, `"\ud83d\ude00`, false, false}, // a surrogate pair would count as two
		{unicode, `"éé"`, true, true},
		{unicode, `"日本"`, true, true},
		{unicode, `"日本語`, false, false},
		// A character's first bytes are refused where no character they
		// begin is taken: the output never runs into a dead end.
		{unicode, "\"éé\xc3", false, false},
		{date, "\"2024\xc3", false, false},
		{date, "\"\xe0", false, false},
		{`{"type":"string","pattern":"^é+$"}`, "\"é\xc3", true, false},
		{`{"type":"string","pattern":"^é+$"}`, "\"é\xc4", false, false},
		{`{"type":"string","pattern":"^[é€]$"}`, "\"\xe2\x82", true, false},
		{`{"type":"string","pattern":"^[é€]$"}`, "\"\xe2\x83", false, false},
		{items, `[1]`, true, true},
		{items, `[1, 2]`, true, true},
		{items, `[]`, false, false},
		{items, `[1, 2, 3`, false, false},
		{intB, `9007199254740991`, true, true},
		{intB, `-9007199254740991`, true, true},
		{intB, `9007199254740992`, false, false},
		{intB, `90071992547409910`, false, false},
		{intB, `-9007199254740992`, false, false},
		{pct, `0`, true, true},
		{pct, `99`, true, true},
		{pct, `100`, false, false},
		{pct, `-`, true, false}, // -0
		{pct, `-1`, false, false},
		{pct, `07`, false, false},
		{mul, `10`, true, true},
		{mul, `15`, true, true},
		{mul, `1`, true, false},  // 1 may become 10
		{mul, `12`, true, false}, // 120
		{mul, `12 `, false, false},
		{mul, `5`, true, false},
		{mul, `5 `, false, false},
		{mul, `-`, false, false},
		{`{"type":"integer","minimum":0,"exclusiveMinimum":true}`, `0`, false, false}, // draft 4
		{`{"type":"integer","minimum":0,"exclusiveMinimum":true}`, `1`, true, true},
		{`{"type":"integer","maximum":10,"exclusiveMaximum":false}`, `10`, true, true},
		{`{"type":"integer","maximum":1e300}`, `123456789012345678`, true, true},
		{`{"type":"integer","maximum":1e300}`, `1234567890123456789`, false, false}, // 18 digits where bounded
		{neg, `-3`, true, true},
		{neg, `-1`, true, true},
		{neg, `-4`, false, false},
		{neg, `0`, false, false},
		{numB, `0`, true, true},
		{numB, `0.5`, true, true},
		{numB, `1`, true, true},
		{numB, `1.0`, true, true},
		{numB, `1.01`, false, false},
		{numB, `2`, false, false},
		{numB, `-0.1`, false, false},
		{numB, `1e0`, false, false}, // no exponent where bounds hold
		{numEx, `0`, true, false},
		{numEx, `0.001`, true, true},
		{numEx, `1.999`, true, true},
		{numEx, `2`, false, false},
		{numEx, `1.`, true, false},
		{numEx, `2.01`, false, false},
		{dec, `0.5`, true, false},
		{dec, `0.500`, true, false},
		{dec, `0.500001`, true, true},
		{dec, `0.4`, false, false},
		{dec, `1`, true, true},
		{dec, `2.25`, true, true},
		{dec, `2.2500`, true, true},
		{dec, `2.2501`, false, false},
		{dec, `2.3`, false, false},
		{dec, `3`, false, false},
		{decNeg, `-0.25`, true, true},
		{decNeg, `-0.2`, true, false},
		{decNeg, `-0.2 `, false, false},
		{decNeg, `-0.3`, true, true},
		{decNeg, `-1.5`, true, true},
		{decNeg, `-1.51`, false, false},
		{decNeg, `-0`, true, false},
		{decNeg, `0`, false, false},
		{date, `"2024-02-29"`, true, true},
		{date, `"2024-13`, false, false},
		{date, `"2024-1-01`, false, false},
		{date, `"2024-01-01T`, false, false},
		{dt, `"2024-02-29T12:30:00Z"`, true, true},
		{dt, `"2024-02-29T12:30:00.123+02:00"`, true, true},
		{dt, `"2024-02-29T12:30:00`, true, false},
		{dt, `"2024-02-29T12:30:00"`, false, false},
		{dt, `"2024-02-29 `, false, false},
		{tm, `"23:59:60Z"`, true, true},
		{tm, `"24`, false, false},
		{email, `"ann.lee@example.com"`, true, true},
		{email, `"ann@`, true, false},
		{email, `"ann@"`, false, false},
		{email, `"ann lee`, false, false},
		{email, `"@`, false, false},
		{uuid, `"123e4567-e89b-12d3-a456-426614174000"`, true, true},
		{uuid, `"123e4567-e89b-12d3-a456-42661417400`, true, false},
		{uuid, `"123e4567-e89b-12d3-a456-42661417400"`, false, false},
		{uuid, `"123g`, false, false},
		{ipv4, `"192.168.0.255"`, true, true},
		{ipv4, `"256`, false, false},
		{ipv4, `"1.2.3`, true, false},
		{ipv4, `"1.2.3"`, false, false},
		{ipv4, `"01`, false, false},
		{uri, `"https://example.com/a?b=c#d"`, true, true},
		{uri, `"urn:isbn:0451450523"`, true, true},
		{uri, `"example.com`, true, false},
		{uri, `"example.com"`, false, false},
		{uri, `"https://a b`, false, false},
		{uri, `"1`, false, false},
		{code, `"ABC-123"`, true, true},
		{code, `"ABC-`, true, false},
		{code, `"ABC-"`, false, false},
		{code, `"AB1`, false, false},
		{search, `"xxabbbcyy"`, true, true},
		{search, `"xxac`, true, false},
		{search, `"xxac"`, false, false},
		{search, `"a\`, false, false}, // no escapes where a pattern holds
		{patLen, `"xx"`, true, true},
		{patLen, `"x`, true, false},
		{patLen, `"x"`, false, false},
		{patLen, `"xxxx`, false, false},
		{patLen, `"y`, false, false},
		// Keywords inside objects, arrays and unions.
		{`{"type":"object","properties":{"d":{"type":["string","null"],"format":"date"}},"required":["d"]}`, `{"d": null}`, true, true},
		{`{"type":"object","properties":{"d":{"type":["string","null"],"format":"date"}},"required":["d"]}`, `{"d": "2020-01-01"}`, true, true},
		{`{"type":"object","properties":{"d":{"type":["string","null"],"format":"date"}},"required":["d"]}`, `{"d": "x`, false, false},
		{`{"type":"array","items":{"type":"integer","minimum":1,"maximum":3}}`, `[1, 3, 2]`, true, true},
		{`{"type":"array","items":{"type":"integer","minimum":1,"maximum":3}}`, `[1, 4`, false, false},
		{`{"type":"array","items":{"type":"integer","minimum":1,"maximum":3}}`, `[1,0`, false, false},
	} {
		s, err := CompileSchema([]byte(tc.schema))
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		prefix, complete := s.Check([]byte(tc.text))
		if prefix != tc.prefix || complete != tc.complete {
			t.Errorf("%s on %s: prefix %v complete %v, want %v %v", tc.schema, tc.text, prefix, complete, tc.prefix, tc.complete)
		}
	}
}

// TestCompileSchemaLax checks that keywords it cannot enforce are left
// out and listed, where CompileSchema refuses them.
func TestCompileSchemaLax(t *testing.T) {
	for _, tc := range []struct {
		schema  string
		skipped []string
		text    string // accepted whole by the lax schema
	}{
		{`{"type":"object","properties":{"a":{"type":"string","format":"hostname"}},"required":["a"]}`, []string{"/properties/a/format"}, `{"a": "x y"}`},
		{`{"type":"string","pattern":"\\bx"}`, []string{"/pattern"}, `"yy"`},
		{`{"type":"number","minimum":0.0000005}`, []string{"/minimum"}, `0.0000001`},
		{`{"type":"number","multipleOf":0.01}`, []string{"/multipleOf"}, `0.123`},
		{`{"allOf":[{"type":"string"}],"not":{}}`, []string{"/allOf", "/not"}, `1`},
		{`{"type":"object","properties":{"a":{"type":"integer","maximum":5}},"required":["a"]}`, nil, `{"a": 5}`},
		// Alternatives that begin alike take any value.
		{`{"anyOf":[{"type":"object","properties":{"cat":{}}},{"type":"object","properties":{"dog":{}}}]}`, []string{"/anyOf"}, `{"cow": 1}`},
		{`{"type":"array","items":[{"type":"string"}]}`, []string{"/items"}, `[1]`},
	} {
		if _, err := CompileSchema([]byte(tc.schema)); (err == nil) != (tc.skipped == nil) {
			t.Errorf("%s: strict compilation: %v", tc.schema, err)
		}
		s, err := CompileSchemaLax([]byte(tc.schema))
		if err != nil {
			t.Errorf("%s: %v", tc.schema, err)
			continue
		}
		if !slices.Equal(s.Unenforced(), tc.skipped) {
			t.Errorf("%s: unenforced %q, want %q", tc.schema, s.Unenforced(), tc.skipped)
		}
		if _, complete := s.Check([]byte(tc.text)); !complete {
			t.Errorf("%s: %s refused", tc.schema, tc.text)
		}
	}
	// Structural faults stay errors.
	var se *SchemaError
	if _, err := CompileSchemaLax([]byte(`{"type":"object","properties":{"a":{}},"required":["b"]}`)); !errors.As(err, &se) || se.Keyword != "required" {
		t.Errorf("required not declared: %v", err)
	}
	if _, err := CompileSchema([]byte(`{"type":"string","format":"hostname"}`)); err == nil || !strings.Contains(err.Error(), `"format"`) {
		t.Errorf("strict unknown format: %v", err)
	}
}

// TestSchemaKeywordsRandomWalk drives the grammar over a real vocabulary,
// choosing among the allowed tokens at random: the output never reaches a
// state where no token is allowed, and ends as a value the schema accepts
// (Check agreeing byte by byte with the token masks).
func TestSchemaKeywordsRandomWalk(t *testing.T) {
	tok := loadTokenizer(t, "tokenizers", "qwen3")
	v, err := NewVocab(tok)
	if err != nil {
		t.Fatal(err)
	}
	const schema = `{"type":"object","properties":{
		"day":{"type":"string","format":"date"},
		"at":{"type":"string","format":"date-time"},
		"id":{"type":"string","format":"uuid"},
		"ip":{"type":"string","format":"ipv4"},
		"mail":{"type":"string","format":"email","maxLength":12},
		"site":{"type":"string","format":"uri","maxLength":16},
		"code":{"type":"string","pattern":"^[A-Z]{2}-[0-9é]{1,3}$"},
		"name":{"type":"string","minLength":2,"maxLength":5},
		"age":{"type":"integer","minimum":18,"exclusiveMaximum":100},
		"n":{"type":"integer","multipleOf":7,"minimum":-50,"maximum":50},
		"score":{"type":"number","exclusiveMinimum":-0.5,"maximum":0.75},
		"tags":{"type":"array","items":{"type":"string","maxLength":2},"minItems":1,"maxItems":2}
	},"required":["day","at","id","ip","mail","site","code","name","age","n","score","tags"]}`
	s, err := CompileSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	g, err := v.Compile(Spec{Schema: s})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for run := range 20 {
		st := g.New(nil)
		logits := make([]float32, v.VocabSize())
		var out []byte
		for step := 0; !st.Done(); step++ {
			if step > 3000 {
				t.Fatalf("run %d: no end after %d tokens: %q", run, step, out)
			}
			for i := range logits {
				logits[i] = 0
			}
			st.Mask(logits)
			var ids []int32
			for id, l := range logits {
				if !math.IsInf(float64(l), -1) {
					ids = append(ids, int32(id))
				}
			}
			if len(ids) == 0 {
				t.Fatalf("run %d: no token allowed after %q", run, out)
			}
			id := ids[rng.IntN(len(ids))]
			st.Accept(id)
			if err := st.Err(); err != nil {
				t.Fatalf("run %d: %v after %q", run, err, out)
			}
			b, _ := v.bytesOf(id)
			out = append(out, b...)
		}
		if run == 0 {
			t.Logf("%s", out)
		}
		if _, complete := s.Check(out); !complete {
			t.Errorf("run %d: %q is not complete", run, out)
		}
		var got struct {
			Day, At, ID, IP, Mail, Site, Code, Name string
			Age, N                                  int64
			Score                                   float64
			Tags                                    []string
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("run %d: %q: %v", run, out, err)
		}
		for _, f := range []struct{ val, re string }{
			{got.Day, `^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$`},
			{got.At, `^\d{4}-\d\d-\d\dT([01]\d|2[0-3]):[0-5]\d:[0-6]\d(\.\d+)?(Z|[+-]\d\d:\d\d)$`},
			{got.ID, `^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$`},
			{got.IP, `^((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$`},
			{got.Mail, `^[^@\s"\\]+@[A-Za-z0-9.-]+$`},
			{got.Site, `^[A-Za-z][A-Za-z0-9+.-]*:\S*$`},
			{got.Code, `^[A-Z]{2}-[0-9é]{1,3}$`},
		} {
			if !regexp.MustCompile(f.re).MatchString(f.val) {
				t.Errorf("run %d: %q does not match %s", run, f.val, f.re)
			}
		}
		n := utf8.RuneCountInString(got.Name)
		if n < 2 || n > 5 || len(got.Mail) > 12 || len(got.Site) > 16 || got.Age < 18 || got.Age >= 100 ||
			got.N%7 != 0 || got.N < -50 || got.N > 50 || got.Score <= -0.5 || got.Score > 0.75 || len(got.Tags) < 1 || len(got.Tags) > 2 {
			t.Errorf("run %d: out of bounds: %s", run, out)
		}
	}
}
