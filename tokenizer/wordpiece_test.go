package tokenizer

import (
	"slices"
	"testing"
)

// bertJSON is a BERT-style tokenizer.json with a tiny vocabulary.
const bertJSON = `{"version":"1.0","added_tokens":[
 {"id":0,"content":"[PAD]","special":true,"normalized":false},
 {"id":1,"content":"[UNK]","special":true,"normalized":false},
 {"id":2,"content":"[CLS]","special":true,"normalized":false},
 {"id":3,"content":"[SEP]","special":true,"normalized":false}],
"normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},
"pre_tokenizer":{"type":"BertPreTokenizer"},
"post_processor":{"type":"TemplateProcessing",
 "single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"[SEP]","type_id":0}}],
 "pair":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"[SEP]","type_id":0}},{"Sequence":{"id":"B","type_id":1}},{"SpecialToken":{"id":"[SEP]","type_id":1}}],
 "special_tokens":{"[CLS]":{"id":"[CLS]","ids":[2],"tokens":["[CLS]"]},"[SEP]":{"id":"[SEP]","ids":[3],"tokens":["[SEP]"]}}},
"decoder":{"type":"WordPiece","prefix":"##","cleanup":true},
"model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":9,
 "vocab":{"[PAD]":0,"[UNK]":1,"[CLS]":2,"[SEP]":3,"un":4,"##aff":5,"##able":6,"cafe":7,"!":8,"北":9,"京":10,"hello":11,"##s":12,"aaaa":13,"##aaaa":14,"'":15,"t":16,"don":17}}}`

func TestWordPiece(t *testing.T) {
	tok, err := Parse([]byte(bertJSON))
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Kind(); got != "WordPiece" {
		t.Errorf("Kind = %q", got)
	}
	tests := []struct {
		text string
		ids  []int32
	}{
		{"unaffable", []int32{4, 5, 6}},
		{"UnAffable!", []int32{4, 5, 6, 8}},               // lowercase, punctuation split
		{"Café", []int32{7}},                              // accents stripped (strip_accents null + lowercase)
		{"北京", []int32{9, 10}},                            // CJK padded with spaces
		{"hellos\u0000 \u200bhello", []int32{11, 12, 11}}, // control and format characters dropped
		{"unx", []int32{1}},                               // a part that matches nothing: the whole word is unknown
		{"aaaaaaaa", []int32{13, 14}},                     // within the limit
		{"aaaaaaaaa", []int32{1}},                         // 9 characters: over max_input_chars_per_word
		{"", nil},
	}
	for _, tc := range tests {
		if got := tok.Encode(tc.text, false); !slices.Equal(got, tc.ids) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.ids)
		}
	}
	ids, types := tok.EncodeSpecial("hello")
	if !slices.Equal(ids, []int32{2, 11, 3}) || !slices.Equal(types, []int32{0, 0, 0}) {
		t.Errorf("EncodeSpecial = %v %v", ids, types)
	}
	ids, types = tok.EncodePair("hello", "unaffable")
	if !slices.Equal(ids, []int32{2, 11, 3, 4, 5, 6, 3}) || !slices.Equal(types, []int32{0, 0, 0, 1, 1, 1, 1}) {
		t.Errorf("EncodePair = %v %v", ids, types)
	}
	if n := tok.PairTokens(); n != 3 {
		t.Errorf("PairTokens = %d, want 3", n)
	}
	for _, tc := range []struct {
		ids  []int32
		skip bool
		want string
	}{
		{[]int32{2, 4, 5, 6, 8, 11, 12, 3}, true, "unaffable! hellos"},
		{[]int32{2, 11, 3}, false, "[CLS] hello [SEP]"},
	} {
		if got := tok.Decode(tc.ids, tc.skip); got != tc.want {
			t.Errorf("Decode(%v, %v) = %q, want %q", tc.ids, tc.skip, got, tc.want)
		}
	}
}

func TestPostProcessorPairs(t *testing.T) {
	roberta := `{"added_tokens":[{"id":0,"content":"<s>","special":true},{"id":2,"content":"</s>","special":true}],
"post_processor":{"type":"RobertaProcessing","sep":["</s>",2],"cls":["<s>",0],"trim_offsets":true,"add_prefix_space":true},
"model":{"type":"WordPiece","unk_token":"<unk>","vocab":{"<s>":0,"<unk>":1,"</s>":2,"a":3,"b":4}}}`
	bert := `{"added_tokens":[],
"post_processor":{"type":"BertProcessing","sep":["[SEP]",2],"cls":["[CLS]",0]},
"model":{"type":"WordPiece","unk_token":"[UNK]","vocab":{"[CLS]":0,"[UNK]":1,"[SEP]":2,"a":3,"b":4}}}`
	for _, tc := range []struct {
		name, json string
		ids, types []int32
		single     []int32
	}{
		{"roberta", roberta, []int32{0, 3, 2, 2, 4, 2}, []int32{0, 0, 0, 0, 0, 0}, []int32{0, 3, 2}},
		{"bert", bert, []int32{0, 3, 2, 4, 2}, []int32{0, 0, 0, 1, 1}, []int32{0, 3, 2}},
	} {
		tok, err := Parse([]byte(tc.json))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ids, types := tok.EncodePair("a", "b")
		if !slices.Equal(ids, tc.ids) || !slices.Equal(types, tc.types) {
			t.Errorf("%s: EncodePair = %v %v, want %v %v", tc.name, ids, types, tc.ids, tc.types)
		}
		if ids, _ := tok.EncodeSpecial("a"); !slices.Equal(ids, tc.single) {
			t.Errorf("%s: EncodeSpecial = %v, want %v", tc.name, ids, tc.single)
		}
	}
}

func TestWordPieceErrors(t *testing.T) {
	for _, js := range []string{
		`{"model":{"type":"WordPiece","unk_token":"[UNK]","vocab":{"a":0}}}`,
		`{"model":{"type":"WordPiece","vocab":["a"]}}`,
		`{"model":{"type":"WordPiece","max_input_chars_per_word":0,"vocab":{"[UNK]":0}}}`,
		`{"normalizer":{"type":"Precompiled","precompiled_charsmap":"AAE="},"model":{"type":"WordPiece","vocab":{"[UNK]":0}}}`,
		`{"post_processor":{"type":"TemplateProcessing","single":[{"Sequence":{"id":"C"}}],"special_tokens":{}},"model":{"type":"WordPiece","vocab":{"[UNK]":0}}}`,
	} {
		if _, err := Parse([]byte(js)); err == nil {
			t.Errorf("Parse(%s): no error", js)
		}
	}
}
