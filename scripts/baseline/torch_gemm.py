# PyTorch baseline: bf16 matmul x[n,k] @ w[m,k]^T at llama-3.1-8b prefill shapes.
import torch, time
print("torch", torch.__version__, "cuda", torch.version.cuda, "cublas via", torch.backends.cuda.preferred_blas_library() if hasattr(torch.backends.cuda, "preferred_blas_library") else "?")
n = 4096
for m, k in [(4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096)]:
    x = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 0.02
    for _ in range(3):
        y = x @ w.t()
    torch.cuda.synchronize()
    reps = 20
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        y = x @ w.t()
    e1.record(); torch.cuda.synchronize()
    s = e0.elapsed_time(e1) / 1e3 / reps
    print(f"torch bf16 matmul {n}x{m}x{k}: {2*n*m*k/s/1e12:.1f} TFLOP/s ({s*1e3:.2f} ms)")
# attention baseline: causal SDPA, 32 heads, 8 kv heads (expanded), head dim 128, 4096 tokens
import torch.nn.functional as F
for hd in (128,):
    q = torch.randn(1, 32, 4096, hd, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 32, 4096, hd, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 32, 4096, hd, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(20):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    e1.record(); torch.cuda.synchronize()
    s = e0.elapsed_time(e1) / 1e3 / 20
    fl = 4 * 32 * hd * 4096 * 4097 / 2
    print(f"torch SDPA causal 32 heads hd {hd} 4096 tokens: {fl/s/1e12:.1f} TFLOP/s ({s*1e3:.2f} ms)")
