#!/usr/bin/env python3
"""Writes an XLM-RoBERTa style tokenizer.json for a SentencePiece Unigram
model without sentencepiece or protobuf installed, in the layout that
transformers' XLMRobertaConverter gives (vocabulary <s> <pad> </s> <unk>,
the model's pieces from the fourth on, <mask>; Precompiled charsmap,
right strip, runs of spaces to one metaspace; Metaspace pre-tokenizer and
decoder; <s> A </s> and <s> A </s></s> B </s>).

Usage: spm_to_xlmr_json.py SPIECE.model OUT.json
"""
import json, struct, sys, base64
data = open(sys.argv[1], 'rb').read()
def varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7f) << s; s += 7
        if c < 0x80: return r, i
def fields(b):
    i = 0
    while i < len(b):
        k, i = varint(b, i); f, w = k >> 3, k & 7
        if w == 0: v, i = varint(b, i)
        elif w == 1: v = b[i:i+8]; i += 8
        elif w == 5: v = b[i:i+4]; i += 4
        elif w == 2:
            n, i = varint(b, i); v = b[i:i+n]; i += n
        else: raise ValueError(w)
        yield f, w, v
pieces, cm = [], b""
for f, w, v in fields(data):
    if f == 1:
        p = {"type": 1, "score": 0.0}
        for g, _, x in fields(v):
            if g == 1: p["piece"] = x.decode()
            elif g == 2: p["score"] = struct.unpack('<f', x)[0]
            elif g == 3: p["type"] = x
        pieces.append(p)
    elif f == 3:
        for g, _, x in fields(v):
            if g == 2: cm = x
            if g == 1: print("normalizer", x, file=sys.stderr)
print(len(pieces), pieces[:10], len(cm), file=sys.stderr)
vocab = [["<s>", 0.0], ["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0]] + [[p["piece"], p["score"]] for p in pieces[3:]] + [["<mask>", 0.0]]
def added(i, c, l=False):
    return {"id": i, "content": c, "single_word": False, "lstrip": l, "rstrip": False, "normalized": False, "special": True}
tj = {"version": "1.0", "truncation": None, "padding": None,
 "added_tokens": [added(0, "<s>"), added(1, "<pad>"), added(2, "</s>"), added(3, "<unk>"), added(len(vocab)-1, "<mask>", True)],
 "normalizer": {"type": "Sequence", "normalizers": [
    {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(cm).decode()},
    {"type": "Strip", "strip_left": False, "strip_right": True},
    {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "▁"}]},
 "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
 "post_processor": {"type": "TemplateProcessing",
   "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
   "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
            {"SpecialToken": {"id": "</s>", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
   "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}, "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
 "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True},
 "model": {"type": "Unigram", "unk_id": 3, "vocab": vocab, "byte_fallback": False}}
json.dump(tj, open(sys.argv[2], "w"), ensure_ascii=False)
