# Builds an lfm2 model with short-convolution layers (layer_types conv and
# full_attention) the way the shared fixtures describe theirs (transformers,
# float32 CPU compute from bf16 values) and writes archs/lfm2 under $2, from
# the config of the shared lfm2 fixture in $1. A development check of the
# convolution path, whose shared fixture has attention layers only.
import json, os, sys, torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM
src, out = sys.argv[1], sys.argv[2]
cfg = json.load(open(os.path.join(src, "config.json")))
cfg["layer_types"] = ["conv", "full_attention", "conv", "conv", "full_attention", "conv"]
cfg["full_attn_idxs"] = [1, 4]
cfg["num_hidden_layers"] = 6
torch.manual_seed(7)
config = AutoConfig.for_model(**{k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version", "dtype")})
m = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
with torch.no_grad():
    for n, p in m.named_parameters():
        if p.dim() > 1:
            p.normal_(0, 0.15)
        else:
            p.uniform_(0.6, 1.4) if "norm" in n or "layernorm" in n else p.normal_(0, 0.1)
        p.copy_(p.to(torch.bfloat16).to(torch.float32))
d = os.path.join(out, "archs", "lfm2")
os.makedirs(d, exist_ok=True)
m.to(torch.bfloat16).save_pretrained(d)
m.to(torch.float32).eval()
g = torch.Generator().manual_seed(11)
ids = torch.randint(3, cfg["vocab_size"], (40,), generator=g)
with torch.no_grad():
    logits = m(ids[None]).logits[0].float()
    gen = m.generate(ids[None, :16], max_new_tokens=24, do_sample=False, use_cache=True, eos_token_id=None, pad_token_id=0)[0, 16:]
save_file({"logits": logits.contiguous(), "input_ids": ids.to(torch.int32)}, os.path.join(d, "reference.safetensors"))
json.dump({"transformers": __import__("transformers").__version__, "model_type": "lfm2", "input_ids": ids.tolist(),
           "greedy_prompt": ids[:16].tolist(), "greedy_ids": gen.tolist(), "logits_shape": list(logits.shape)},
          open(os.path.join(d, "reference.json"), "w"))
print("layer types", config.layer_types, "greedy", gen.tolist()[:8], "logit std", logits.std().item())
