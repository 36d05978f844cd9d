"""Builds the encoder reference fixtures under model/testdata/encoders.

Run where PyTorch and transformers are installed:

    python scripts/encoder_fixtures.py OUTDIR

For each family (BERT, XLM-RoBERTa, ModernBERT) it makes a tiny random
base model and a sequence-classification model, rounds every weight to a
bf16-representable value, saves the model with save_pretrained (bf16, or
f32 for one model so that both stored types are covered) and writes
reference.safetensors: the inputs (ids.N, types.N as int32) of a batch of
three inputs of different lengths, the float32 last hidden state of each
(hidden.N, computed on the padded batch with an attention mask) and, for
the classifiers, the logits [3, labels].
"""

import inspect
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    ModernBertConfig,
    ModernBertForSequenceClassification,
    ModernBertModel,
    XLMRobertaConfig,
    XLMRobertaForSequenceClassification,
    XLMRobertaModel,
)

OUT = sys.argv[1]
print("transformers", transformers.__version__, "torch", torch.__version__)


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower() and name.endswith("weight"):
                v = 1 + 0.1 * torch.randn(p.shape, generator=g)
            elif name.endswith("bias"):
                v = 0.1 * torch.randn(p.shape, generator=g)
            else:
                v = 0.15 * torch.randn(p.shape, generator=g)
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


LENGTHS = [12, 7, 3]


def inputs(first, pad, vocab, types, seed):
    g = torch.Generator().manual_seed(seed)
    ids, tts = [], []
    for n in LENGTHS:
        x = torch.randint(3, vocab, (n,), generator=g)
        x[0] = first
        t = torch.zeros(n, dtype=torch.long)
        if types:
            t[n // 2 :] = 1
        ids.append(x)
        tts.append(t)
    L = max(LENGTHS)
    bid = torch.full((len(LENGTHS), L), pad, dtype=torch.long)
    btt = torch.zeros((len(LENGTHS), L), dtype=torch.long)
    mask = torch.zeros((len(LENGTHS), L), dtype=torch.long)
    for i, n in enumerate(LENGTHS):
        bid[i, :n] = ids[i]
        btt[i, :n] = tts[i]
        mask[i, :n] = 1
    return ids, tts, bid, btt, mask


def make(name, model, first, pad, types, cls, dtype, seed):
    model.eval()
    randomize(model, seed)
    vocab = model.config.vocab_size
    ids, tts, bid, btt, mask = inputs(first, pad, vocab, types, seed + 1)
    kw = dict(input_ids=bid, attention_mask=mask)
    if types:
        kw["token_type_ids"] = btt
    ref = {}
    with torch.no_grad():
        base = getattr(model, model.base_model_prefix) if cls else model
        hs = base(**kw).last_hidden_state
        if cls:
            ref["logits"] = model(**kw).logits.float().contiguous()
    for i, n in enumerate(LENGTHS):
        ref[f"ids.{i}"] = ids[i].to(torch.int32)
        ref[f"types.{i}"] = tts[i].to(torch.int32)
        ref[f"hidden.{i}"] = hs[i, :n].float().contiguous()
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    model.to(dtype).save_pretrained(d, safe_serialization=True)
    save_file(ref, os.path.join(d, "reference.safetensors"))
    print(name, {k: tuple(v.shape) for k, v in ref.items() if not k.startswith(("ids", "types"))})
    if cls:
        print(name, "logits", ref["logits"])


common = dict(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
              hidden_act="gelu", attn_implementation="eager")

bert = BertConfig(pad_token_id=0, **common)
make("bert", BertModel(bert), 101 % 300, 0, True, False, torch.bfloat16, 10)
bert_cls = BertConfig(pad_token_id=0, num_labels=3, **common)
make("bert-cls", BertForSequenceClassification(bert_cls), 101 % 300, 0, True, True, torch.float32, 20)

xlmr = XLMRobertaConfig(pad_token_id=1, bos_token_id=0, eos_token_id=2, **common)
make("xlm-roberta", XLMRobertaModel(xlmr), 0, 1, True, False, torch.bfloat16, 30)
xlmr_cls = XLMRobertaConfig(pad_token_id=1, bos_token_id=0, eos_token_id=2, num_labels=1, **common)
make("xlm-roberta-cls", XLMRobertaForSequenceClassification(xlmr_cls), 0, 1, True, True, torch.bfloat16, 40)

mb = dict(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
          num_attention_heads=4, max_position_embeddings=64, global_attn_every_n_layers=2,
          local_attention=6, global_rope_theta=160000.0, local_rope_theta=10000.0,
          pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
          hidden_activation="gelu", classifier_activation="gelu", reference_compile=False,
          attn_implementation="eager")
make("modernbert", ModernBertModel(ModernBertConfig(**mb)), 1, 0, False, False, torch.bfloat16, 50)
make("modernbert-cls", ModernBertForSequenceClassification(
    ModernBertConfig(num_labels=2, classifier_pooling="mean", **mb)), 1, 0, False, True, torch.bfloat16, 60)

for n in ["modernbert", "modernbert-cls", "bert", "xlm-roberta-cls"]:
    print(n, open(os.path.join(OUT, n, "config.json")).read())
import transformers.models.modernbert.modeling_modernbert as mm
src = inspect.getsource(mm)
for key in ["sliding_window", "local_attention", "window"]:
    for i, line in enumerate(src.splitlines()):
        if key in line:
            print("MB", i, line)
