#!/usr/bin/env python3
"""Writes reference encodings of encoder-model tokenizers (BERT WordPiece,
XLM-RoBERTa Unigram, ModernBERT byte-level BPE) for tokenizer/testdata.

Usage: encoder_tokenizer_refs.py STRINGS.json OUTDIR TOKENIZER_DIR...

STRINGS.json is a reference.json of ../shared/fixtures/tokenizers (its
cases' texts are reused). Each TOKENIZER_DIR holds a tokenizer.json (and
tokenizer_config.json when present); OUTDIR/<name>.reference.json gets,
for every text, the ids with and without special tokens and the decoding,
and for every pair the ids and token type ids with special tokens.
"""
import json, os, sys
import tokenizers, transformers
from transformers import AutoTokenizer

EXTRA = [
    "Héllo Wörld, CAFÉ crème brûlée", "naïve façade Ångström", "ÀÉÎÕÜ àéîõü",
    "北京是中国的首都。", "我爱自然语言处理", "日本語のテキストと English mixed",
    "한국어 문장입니다", "Привет, как дела?", "مرحبا بالعالم", "नमस्ते दुनिया",
    "MiXeD CaSe WoRdS and UPPER lower", "iPhone McDonald's O'Neill",
    "x" * 150, "supercalifragilisticexpialidocious" * 4,
    "a" * 99 + " " + "b" * 100 + " " + "c" * 101,
    "tab\tnew\nline\r\nzero\u200bwidth\u00a0nbsp", "control\x00\x07chars\x1f",
    "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ １２３", "ﬁ ligature ﬀ ①②③ ㎞", "e\u0301 vs é (combining)",
    "emoji 😀👍🏽 family 👨‍👩‍👧", "[CLS] [SEP] [MASK] <s> </s> <mask> in text",
    "  leading and trailing spaces  ", "multiple     spaces", "don't won't can't",
    "3.14159 1,000,000 $5.99 50% #hashtag @user", "https://example.com/a?b=c&d=e",
    "def f(x):\n    return x**2  # comment",
    "Ⅻ ½ ™ ℃ ﹏ ｶﾀｶﾅ ㈱ ㍻", "\u3000ideographic\u3000space", "Å (ring) vs Å (angstrom)",
    "\u1100\u1161\u11a8 jamo", "flags 🇫🇷🇯🇵 and 👍🏽 skin", "Z\u0324\u0354\u0367\u0311\u0313 zalgo",
    "กำลัง ทำ ภาษาไทย", "क्षत्रिय हिन्दी", "ǅ ǆ Ǆ ĳ", "a\u0308\u0301\u0323 stacked",
    "soft\u00adhyphen and\ufeffbom", "x\u0301\u0301\u0301\u0301\u0301\u0301 many marks",
    "do n't , ' s . ? ! it 's they 're I 've I 'm", "Hello ... world !",
    "Don't stop!  He said: \"no\", and 'yes'.",
    "a\u200db c\u200d\u0301d \u200d", "\u0915\u093f\u0903 visarga", "ab\u0e33 \u0e01\u0e33",
    "\u00e9\u0301 \uff21\u0301 \uff41\u0308", "\u1100\u1161 \u1100\u1161\u11a8\u11a8",
    "\r\n\r\r\n\n x", "\u2163\u0301 \u2460\u0308 \u00bd\u0301",
]
PAIRS = [
    ("what is the capital of china?", "Beijing is the capital of China."),
    ("query: how much protein should a female eat", "passage: As a general guideline, the CDC's average requirement of protein for women ages 19 to 70 is 46 grams per day."),
    ("Héllo", "Wörld"), ("北京", "中国的首都"), ("", "empty first"), ("empty second", ""),
    ("MiXeD CaSe", "x" * 120), ("don't", "can't won't"),
]

def main():
    strings, out, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
    texts = [c["text"] for c in json.load(open(strings))["cases"]] + EXTRA
    os.makedirs(out, exist_ok=True)
    for d in dirs:
        name = os.path.basename(os.path.normpath(d))
        try:
            tok = AutoTokenizer.from_pretrained(d)
        except Exception as ex:
            print("AutoTokenizer", d, repr(ex)[:300])
            tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"))
        raw = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        cases = []
        for t in texts:
            e = raw.encode(t, add_special_tokens=False)
            s = raw.encode(t, add_special_tokens=True)
            cases.append({"text": t, "ids": e.ids, "ids_with_special": s.ids,
                          "type_ids": s.type_ids,
                          "decoded": raw.decode(e.ids, skip_special_tokens=False),
                          "decoded_special": raw.decode(s.ids, skip_special_tokens=False),
                          "decoded_skip": raw.decode(s.ids, skip_special_tokens=True),
                          "transformers_decoded": tok.decode(s.ids, skip_special_tokens=True)})
        pairs = []
        for a, b in PAIRS:
            p = raw.encode(a, b, add_special_tokens=True)
            h = tok(a, b)
            if p.ids != h["input_ids"]:
                print("pair mismatch with transformers", name, a, b)
            pairs.append({"a": a, "b": b, "ids": p.ids, "type_ids": p.type_ids,
                          "decoded_special": raw.decode(p.ids, skip_special_tokens=False),
                          "decoded_skip": raw.decode(p.ids, skip_special_tokens=True),
                          "transformers_agrees": p.ids == h["input_ids"]})
        json.dump({"tokenizer": name, "class": type(tok).__name__,
                   "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                   "cases": cases, "pairs": pairs},
                  open(os.path.join(out, name + ".reference.json"), "w"), ensure_ascii=False, indent=1)
        print(name, type(tok).__name__, len(cases), len(pairs))

if __name__ == "__main__":
    main()
