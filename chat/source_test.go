package chat

import (
	"testing"
)

// TestWhitespace checks whitespace control against Jinja2 as Hugging Face
// sets it up (trim_blocks, lstrip_blocks, keep_trailing_newline off). The
// expected strings were rendered by Python Jinja2 3.1.6; the engine alone
// gets several of them wrong (see source.go).
func TestWhitespace(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"newline after an expression before a block end", "{% for m in [1, 2] %}{{ m }}\n{% endfor %}", "1\n2\n"},
		{"indented block end after an expression", "{% for m in [1, 2] %}{{ m }}\n  {% endfor %}", "1\n2\n"},
		{"indentation before an expression and a block", "  {{ 1 }}{% if true %}x{% endif %}", "  1x"},
		{"dash reaches only the adjacent text", "t  {{ 1 }}{{- 2 }}", "t  12"},
		{"trim_blocks", "{% if true %}\nA\n{% endif %}\nB", "A\nB"},
		{"lstrip_blocks", "A\n    {% if true %}\n    B\n    {% endif %}\nC", "A\n    B\nC"},
		{"lstrip_blocks not mid-line", "A {% if true %}B{% endif %}", "A B"},
		{"lstrip after a trimmed newline", "{% if true %}\n  {% if true %}x{% endif %}{% endif %}", "x"},
		{"dashes", "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c", "abc"},
		{"expression dashes", "a \n {{- 'b' -}} \n c", "abc"},
		{"comments trim like blocks", "{{ 1 }}\n{# c #}\n{{ 2 }}\n  {#- d -#}\n3", "1\n23"},
		{"final newline dropped", "{{ 1 }}\n", "1"},
		{"only one final newline dropped", "{{ 1 }}\n\n", "1\n"},
		{"CRLF normalized", "a\r\nb\r\n{% if true %}\r\nc{% endif %}\r\n", "a\nb\nc"},
		{"raw keeps its body", "{% raw %}\n  {% if %}{{ x }}{% endraw %}", "\n  {% if %}{{ x }}"},
		{"raw with dashes", "a {%- raw -%}  {{ x }}  {%- endraw -%} b", "a{{ x }}b"},
		{"lstrip before endraw", "{% raw %}x\n   {% endraw %}\ny", "x\ny"},
		{"raw with a quote", "{% raw %}say \"hi\" \\ {% endraw %}", "say \"hi\" \\ "},
		{"set block", "{% set x %}\n  v\n{% endset %}[{{ x }}]", "[  v\n]"},
		{"whitespace-only template", "   \n  ", "   \n  "},
		{"leading indentation before a block", "   {% if true %}x{% endif %}", "x"},
		{"unicode space and a dash", "a\u3000{{- 'b' }}", "ab"},
		{"no-break space is kept by lstrip_blocks", "a\n {% if true %}b{% endif %}", "a\nb"},
		{"newline in an expression tag", "{{\n1\n}}\n{% if true %}\nx{% endif %}", "1\nx"},
		{"macro whitespace", "{% macro m(a) %}\n  [{{ a }}]\n{% endmacro %}\n{{ m(1) }}{{ m(2) }}", "  [1]\n  [2]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := Parse(tt.src, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := tmpl.Render(Input{})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestFilterUses(t *testing.T) {
	tests := []struct {
		expr string
		want []int
	}{
		{" x | tojson ", []int{5}},
		{"x|tojson(indent=2)|safe", []int{2}},
		{"'a | tojson' ~ (y |tojson)", []int{19}},
		{`"\" | tojson" | tojson`, []int{16}},
		{"x | tojsonx | to_json", nil},
		{"tojson(x)", nil},
	}
	for _, tt := range tests {
		got := filterUses(tt.expr, "tojson")
		if len(got) != len(tt.want) {
			t.Errorf("filterUses(%q) = %v, want %v", tt.expr, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("filterUses(%q) = %v, want %v", tt.expr, got, tt.want)
			}
		}
	}
}

func TestPrepareTrace(t *testing.T) {
	tests := []struct {
		src, want string
	}{
		{"{{ x }}", "{{ __lem_line(1)( x )}}"},
		{"\n{%- if a -%}\n{% elif b %}{% endif %}", "{% if __lem_line(2)( a )%}{% elif __lem_line(3)( b )%}{% endif %}"},
		{"{% for k, v in d|items if v recursive %}{% endfor %}", "{% for k, v in __lem_line(1)( d|items )if v recursive %}{% endfor %}"},
		{"{% set ns.a = b == c %}", "{% set ns.a = __lem_line(1)( b == c )%}"},
		{"{% set x %}y{% endset %}", "{% set x %}y{% endset %}"},
		{"{{ t | tojson }}", "{{ __lem_line(1)( t | __lem_tojson )}}"},
		{"{% filter upper %}x{% endfilter %}", "{% filter upper %}x{% endfilter %}"},
	}
	for _, tt := range tests {
		got, ok := prepare(tt.src, true)
		if !ok {
			t.Errorf("prepare(%q) failed", tt.src)
			continue
		}
		if got != tt.want {
			t.Errorf("prepare(%q)\n got %q\nwant %q", tt.src, got, tt.want)
		}
	}
}
