# An independent float64 forward of an LFM2 model (numpy), from the model
# card's math: python3 lfm2_f64.py FIXTURE_DIR [LEM_LOGITS.f32] compares it with
# the fixture's reference logits and, given a raw float32 dump of lem's
# logits, with lem. Used to tell which side of a logit gap is off.
import json, struct, sys, numpy as np
d = sys.argv[1]
def load(p):
    f = open(p, 'rb'); n = struct.unpack('<Q', f.read(8))[0]; h = json.loads(f.read(n)); base = 8 + n
    raw = open(p, 'rb').read()
    out = {}
    for k, v in h.items():
        if k == '__metadata__': continue
        a, b = v['data_offsets']; buf = raw[base + a: base + b]
        if v['dtype'] == 'BF16':
            u = np.frombuffer(buf, dtype=np.uint16).astype(np.uint32) << 16
            arr = u.view(np.float32).astype(np.float64)
        elif v['dtype'] == 'F32': arr = np.frombuffer(buf, dtype=np.float32).astype(np.float64)
        elif v['dtype'] == 'I32': arr = np.frombuffer(buf, dtype=np.int32)
        out[k] = arr.reshape(v['shape'])
    return out
W = load(d + '/model.safetensors'); R = load(d + '/reference.safetensors')
cfg = json.load(open(d + '/config.json'))
ids = R['input_ids']; T = len(ids); H = cfg['hidden_size']; nh = cfg['num_attention_heads']; nkv = cfg['num_key_value_heads']; hd = H // nh; eps = cfg['norm_eps']
def rms(x, w): return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w
def silu(x): return x / (1 + np.exp(-x))
x = W['model.embed_tokens.weight'][ids]
theta = cfg['rope_parameters']['rope_theta']
inv = 1.0 / theta ** (np.arange(0, hd, 2) / hd)
ang = np.arange(T)[:, None] * inv[None, :]
cos = np.concatenate([np.cos(ang)] * 2, -1); sin = np.concatenate([np.sin(ang)] * 2, -1)
def rope(q):  # [T, heads, hd]
    h2 = hd // 2; rot = np.concatenate([-q[..., h2:], q[..., :h2]], -1)
    return q * cos[:, None, :] + rot * sin[:, None, :]
for i, lt in enumerate(cfg['layer_types']):
    p = f'model.layers.{i}.'
    h = rms(x, W[p + 'operator_norm.weight'])
    if lt == 'conv':
        bcx = h @ W[p + 'conv.in_proj.weight'].T
        B, C, xx = bcx[:, :H], bcx[:, H:2 * H], bcx[:, 2 * H:]
        bx = B * xx; w = W[p + 'conv.conv.weight'][:, 0, :]; K = w.shape[1]
        pad = np.concatenate([np.zeros((K - 1, H)), bx], 0)
        conv = sum(pad[q:q + T] * w[:, q] for q in range(K))
        o = (C * conv) @ W[p + 'conv.out_proj.weight'].T
    else:
        a = p + 'self_attn.'
        q = (h @ W[a + 'q_proj.weight'].T).reshape(T, nh, hd); k = (h @ W[a + 'k_proj.weight'].T).reshape(T, nkv, hd); v = (h @ W[a + 'v_proj.weight'].T).reshape(T, nkv, hd)
        q = rms(q, W[a + 'q_layernorm.weight']); k = rms(k, W[a + 'k_layernorm.weight'])
        q, k = rope(q), rope(k)
        out = np.zeros((T, nh, hd))
        for hh in range(nh):
            kv = hh // (nh // nkv)
            s = q[:, hh] @ k[:, kv].T / np.sqrt(hd)
            s = np.where(np.tril(np.ones((T, T))) > 0, s, -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True)
            out[:, hh] = s @ v[:, kv]
        o = out.reshape(T, H) @ W[a + 'out_proj.weight'].T
    x = x + o
    f = p + 'feed_forward.'
    h = rms(x, W[p + 'ffn_norm.weight'])
    x = x + (silu(h @ W[f + 'w1.weight'].T) * (h @ W[f + 'w3.weight'].T)) @ W[f + 'w2.weight'].T
logits = rms(x, W['model.embedding_norm.weight']) @ W['lm_head.weight'].T
ref = R['logits']
print('f64 vs HF reference: max|Δ| %.2e' % np.abs(logits - ref).max(), 'per pos (every 8th):', ' '.join('%.1e' % v for v in np.abs(logits - ref).max(-1)[::8]))
if len(sys.argv) > 2:
    lem = np.fromfile(sys.argv[2], dtype=np.float32).reshape(ref.shape)
    print('f64 vs lem: max|Δ| %.2e' % np.abs(logits - lem).max(), 'per pos:', ' '.join('%.1e' % v for v in np.abs(logits - lem).max(-1)[::8]))
