package tokenizer

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
)

// encoderReference is a reference written by
// scripts/encoder_tokenizer_refs.js with Hugging Face tokenizers.
type encoderReference struct {
	Tokenizer  string `json:"tokenizer"`
	Tokenizers string `json:"tokenizers"`
	Cases      []struct {
		Text           string  `json:"text"`
		IDs            []int32 `json:"ids"`
		IDsWithSpecial []int32 `json:"ids_with_special"`
		TypeIDs        []int32 `json:"type_ids"`
		Decoded        string  `json:"decoded"`
		DecodedSpecial string  `json:"decoded_special"`
		DecodedSkip    string  `json:"decoded_skip"`
	} `json:"cases"`
	Pairs []struct {
		A              string  `json:"a"`
		B              string  `json:"b"`
		IDs            []int32 `json:"ids"`
		TypeIDs        []int32 `json:"type_ids"`
		DecodedSpecial string  `json:"decoded_special"`
		DecodedSkip    string  `json:"decoded_skip"`
	} `json:"pairs"`
}

// TestEncoderConformance checks the tokenizers of encoder models against
// Hugging Face tokenizers: bert-base-uncased (WordPiece, BertNormalizer)
// and an XLM-RoBERTa pipeline (Precompiled charsmap, Metaspace, Unigram,
// <s> a </s></s> b </s>) over XLNet's SentencePiece model. Ids, token type
// ids and decodings must match exactly. See testdata/encoders/README.
func TestEncoderConformance(t *testing.T) {
	for _, name := range []string{"bert-base-uncased", "xlmr-xlnet-spiece"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", "encoders")
			data, err := readMaybeGzip(filepath.Join(dir, name+".json.gz"))
			if err != nil {
				t.Fatal(err)
			}
			tok, err := Parse(data)
			if err != nil {
				t.Fatalf("parse %s: %v", name, err)
			}
			data, err = readMaybeGzip(filepath.Join(dir, name+".reference.json.gz"))
			if err != nil {
				t.Fatal(err)
			}
			var ref encoderReference
			if err := json.Unmarshal(data, &ref); err != nil {
				t.Fatalf("parse reference: %v", err)
			}
			if len(ref.Cases) == 0 || len(ref.Pairs) == 0 {
				t.Fatal("empty reference")
			}
			for _, c := range ref.Cases {
				if got := tok.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
					t.Errorf("Encode(%q)\n got %v\nwant %v", c.Text, got, c.IDs)
				}
				ids, typeIDs := tok.EncodeSpecial(c.Text)
				if !slices.Equal(ids, c.IDsWithSpecial) || !slices.Equal(typeIDs, c.TypeIDs) {
					t.Errorf("EncodeSpecial(%q)\n got %v %v\nwant %v %v", c.Text, ids, typeIDs, c.IDsWithSpecial, c.TypeIDs)
				}
				for _, d := range []struct {
					ids  []int32
					skip bool
					want string
				}{{c.IDs, false, c.Decoded}, {c.IDsWithSpecial, false, c.DecodedSpecial}, {c.IDsWithSpecial, true, c.DecodedSkip}} {
					if got := tok.Decode(d.ids, d.skip); got != d.want {
						t.Errorf("Decode(%v, %v) of %q\n got %q\nwant %q", d.ids, d.skip, c.Text, got, d.want)
					}
				}
			}
			for _, p := range ref.Pairs {
				ids, typeIDs := tok.EncodePair(p.A, p.B)
				if !slices.Equal(ids, p.IDs) || !slices.Equal(typeIDs, p.TypeIDs) {
					t.Errorf("EncodePair(%q, %q)\n got %v %v\nwant %v %v", p.A, p.B, ids, typeIDs, p.IDs, p.TypeIDs)
				}
				if got := tok.Decode(p.IDs, false); got != p.DecodedSpecial {
					t.Errorf("Decode(pair %q, %q)\n got %q\nwant %q", p.A, p.B, got, p.DecodedSpecial)
				}
				if got := tok.Decode(p.IDs, true); got != p.DecodedSkip {
					t.Errorf("Decode(pair %q, %q, skip)\n got %q\nwant %q", p.A, p.B, got, p.DecodedSkip)
				}
			}
		})
	}
}
