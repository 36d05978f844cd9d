# PyTorch + transformers baseline: greedy generate with a static cache on
# random bf16 weights of the llama-3.2-1b and llama-3.1-8b geometries.
import os, sys, time
t_import = time.time()
import torch
from transformers import LlamaConfig, LlamaForCausalLM
print(f"hf: torch {torch.__version__}, import {time.time()-t_import:.1f}s", flush=True)
# Wait for the lem benchmarks to leave the GPU.
go = sys.argv[1] if len(sys.argv) > 1 else ""
while go and not os.path.exists(go):
    time.sleep(0.2)
rope8 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
rope32 = dict(rope8, factor=32.0)
geos = {
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True),
    "llama-3.1-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=False),
}
new = int(os.environ.get("HF_NEW", "128"))
for name in os.environ.get("HF_GEOS", "llama-3.2-1b,llama-3.1-8b").split(","):
    t0 = time.time()
    g = geos[name]
    cfg = LlamaConfig(rms_norm_eps=1e-5, max_position_embeddings=131072, rope_theta=500000.0, hidden_act="silu", **g)
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    try:
        # Allocate on the meta device, then fill random weights on the GPU:
        # much faster than initialising 8B parameters on the CPU.
        with torch.device("meta"):
            model = LlamaForCausalLM(cfg)
        model = model.to_empty(device="cuda")
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.fill_(1.0)
                else:
                    p.normal_(0, 0.02)
        rot = model.model.rotary_emb
        model.model.rotary_emb = type(rot)(config=cfg, device="cuda")
    except Exception as e:
        print(f"hf {name}: meta init failed ({e}); initialising on the GPU", flush=True)
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    model.eval()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    ids = torch.randint(0, cfg.vocab_size, (1, 8), device="cuda")
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
    try:
        kw_c = dict(kw, cache_implementation="static")
        model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw_c)
        kw = kw_c
    except Exception as e:
        print(f"hf {name}: static cache failed ({e}); dynamic cache", flush=True)
    print(f"hf {name}: setup {time.time()-t0:.1f}s, {weights/1e9:.2f} GB of weights", flush=True)
    with torch.inference_mode():
        def timed(n):
            torch.cuda.synchronize()
            t = time.perf_counter()
            out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kw)
            torch.cuda.synchronize()
            assert out.shape[1] == ids.shape[1] + n, out.shape
            return time.perf_counter() - t
        timed(new)  # warm-up at full length
        best = None
        for _ in range(2):
            t1, tn = timed(1), timed(new)
            r = (new - 1) / (tn - t1)
            best = r if best is None else max(best, r)
        print(f"HF-RESULT {name} decode {best:.1f} tok/s ({cfg.num_hidden_layers} layers, static={'cache_implementation' in kw}, eager)", flush=True)
    del model
    torch.cuda.empty_cache()
