# Builds server/testdata/encoders: the encoder fixtures of model/testdata/encoders
# with a tiny WordPiece tokenizer (vocabulary under the fixtures' 300) and
# sentence-transformers pooling files, for serving tests. Run from the
# repository root.
import json, os, shutil
base='server/testdata/encoders'
letters=[chr(c) for c in range(ord('a'),ord('z')+1)]
digits=[str(d) for d in range(10)]
punct=list(".,!?'-:;()\"")
words="the an is of in on and to what which who capital city paris france berlin germany rome italy cat dog sat mat sky blue green red sun moon hello world query passage document search answer question river mountain ocean book library music food apple banana tea coffee".split()
def vocab(specials):
    v=list(specials)+letters+['##'+l for l in letters]+digits+['##'+d for d in digits]+punct+words+['##ing','##ed']
    assert len(v)<300, len(v)
    import collections; assert len(set(v))==len(v), [k for k,c in collections.Counter(v).items() if c>1]
    return {t:i for i,t in enumerate(v)}
def tok(specials, cls, sep, unk, style):
    v=vocab(specials)
    added=[{"id":v[t],"content":t,"single_word":False,"lstrip":False,"rstrip":False,"normalized":False,"special":True} for t in specials]
    S=lambda t,ty:{"SpecialToken":{"id":t,"type_id":ty}}
    Q=lambda a,ty:{"Sequence":{"id":a,"type_id":ty}}
    single=[S(cls,0),Q("A",0),S(sep,0)]
    if style=="xlmr":  # <s> A </s></s> B </s>, all type 0
        pair=[S(cls,0),Q("A",0),S(sep,0),S(sep,0),Q("B",0),S(sep,0)]
    elif style=="bert":
        pair=[S(cls,0),Q("A",0),S(sep,0),Q("B",1),S(sep,1)]
    else:  # modernbert: no token types
        pair=[S(cls,0),Q("A",0),S(sep,0),Q("B",0),S(sep,0)]
    return {"version":"1.0","truncation":None,"padding":None,"added_tokens":added,
      "normalizer":{"type":"BertNormalizer","clean_text":True,"handle_chinese_chars":True,"strip_accents":None,"lowercase":True},
      "pre_tokenizer":{"type":"BertPreTokenizer"},
      "post_processor":{"type":"TemplateProcessing","single":single,"pair":pair,
        "special_tokens":{cls:{"id":cls,"ids":[v[cls]],"tokens":[cls]},sep:{"id":sep,"ids":[v[sep]],"tokens":[sep]}}},
      "decoder":{"type":"WordPiece","prefix":"##","cleanup":True},
      "model":{"type":"WordPiece","unk_token":unk,"continuing_subword_prefix":"##","max_input_chars_per_word":100,"vocab":v}}
bert=["[PAD]","[UNK]","[CLS]","[SEP]","[MASK]"]
mbert=["[PAD]","[CLS]","[SEP]","[UNK]","[MASK]"]  # ModernBERT's fixture: cls 1, sep 2
xlmr=["<s>","<pad>","</s>","<unk>","<mask>"]
sets={
 "bge-tiny":("bert",tok(bert,"[CLS]","[SEP]","[UNK]","bert"),"cls"),
 "e5-tiny":("xlm-roberta",tok(xlmr,"<s>","</s>","<unk>","xlmr"),"mean"),
 "reranker-tiny":("xlm-roberta-cls",tok(xlmr,"<s>","</s>","<unk>","xlmr"),None),
 "modernbert-reranker-tiny":("modernbert-cls",tok(mbert,"[CLS]","[SEP]","[UNK]","modernbert"),None),
}
for name,(src,t,pool) in sets.items():
    d=os.path.join(base,name); os.makedirs(d,exist_ok=True)
    for f in ("config.json","model.safetensors"):
        shutil.copy(os.path.join('model/testdata/encoders',src,f),os.path.join(d,f))
    json.dump(t,open(os.path.join(d,"tokenizer.json"),"w"),ensure_ascii=False)
    if pool:
        json.dump([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
                   {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
                   {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}],open(os.path.join(d,"modules.json"),"w"),indent=1)
        os.makedirs(os.path.join(d,"1_Pooling"),exist_ok=True)
        json.dump({"word_embedding_dimension":32,"pooling_mode_cls_token":pool=="cls","pooling_mode_mean_tokens":pool=="mean","pooling_mode_max_tokens":False,"pooling_mode_mean_sqrt_len_tokens":False},open(os.path.join(d,"1_Pooling","config.json"),"w"),indent=1)
