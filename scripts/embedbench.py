#!/usr/bin/env python3
"""Embedding throughput of lem against llama.cpp's llama-server on one GGUF.

Starts `lem serve` and `llama-server --embeddings --pooling last` on the
same GGUF file, both on the CPU with the same number of threads, and sends
each, in turn, the same request to /v1/embeddings: BATCH inputs of TOKENS
token ids each (seeded random ids, so both engines run exactly the same
tokens). After a warm-up request, it repeats the request REPS times per
engine, alternating between them so that a change in the machine's load
falls on both, and prints inputs/s and tokens/s per engine (median and
best of the repetitions) and lem's ratio to llama.cpp.

  scripts/embedbench.py /work/models/qwen2.5-0.5b-q4_0.gguf
  LLAMA_BIN=/work/llama/build/bin THREADS=2 REPS=5 scripts/embedbench.py MODEL.gguf

Environment: LEM (a lem binary; default: built from this checkout),
LLAMA_BIN (the folder of llama-server, also put on LD_LIBRARY_PATH),
THREADS (2), BATCH (32), TOKENS (512), REPS (5).
"""

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def env_int(name, default):
    return int(os.environ.get(name, default))


def post(url, body, timeout=3600):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        sys.exit(f"{url}: {e.code} {e.read()[:500]!r}")


def model_id(url):
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
        return json.loads(r.read())["data"][0]["id"]


def wait_ready(url, proc, log, timeout=600):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"{url}: the server exited ({proc.returncode}); its log: {log}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    sys.exit(f"{url}: not ready after {timeout}s; its log: {log}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    model = sys.argv[1]
    threads, batch, tokens, reps = env_int("THREADS", 2), env_int("BATCH", 32), env_int("TOKENS", 512), env_int("REPS", 5)
    llama_bin = os.environ.get("LLAMA_BIN", "/work/llama/build/bin")
    tmp = tempfile.mkdtemp(prefix="embedbench-")
    lem = os.environ.get("LEM")
    if not lem:
        lem = os.path.join(tmp, "lem")
        subprocess.run(["go", "build", "-o", lem, "./cmd/lem"], cwd=ROOT, check=True,
                       env=dict(os.environ, CGO_ENABLED="0"))

    # Fresh ids for every request (the same for both engines), so that no
    # prompt cache can serve a repetition from an earlier one.
    rng = random.Random(1)

    def batch_ids(n):
        return [[rng.randrange(1000, 20000) for _ in range(tokens)] for _ in range(n)]
    servers = {
        "lem": ([lem, "serve", model, "--addr", "127.0.0.1:38611", "--threads", str(threads), "--device", "cpu",
                 "--ctx", str(max(tokens * 2, 1024))], "http://127.0.0.1:38611", {}),
        "llama.cpp": ([os.path.join(llama_bin, "llama-server"), "-m", model, "--port", "38612", "--embeddings",
                       "--pooling", "last", "-ub", str(tokens), "-b", "16384", "-np", "1", "-c", str(max(tokens * 2, 1024)),
                       "-t", str(threads), "-tb", str(threads)],
                      "http://127.0.0.1:38612", {"LD_LIBRARY_PATH": llama_bin}),
    }
    procs, ids_of = {}, {}
    try:
        for name, (cmd, url, extra) in servers.items():
            log = os.path.join(tmp, name.replace(".", "") + ".log")
            procs[name] = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                                           env=dict(os.environ, **extra))
            wait_ready(url, procs[name], log)
            ids_of[name] = model_id(url)
            # Warm-up: the weights paged in, buffers grown.
            post(url + "/v1/embeddings", {"model": ids_of[name], "input": batch_ids(2)})
        times = {name: [] for name in servers}
        dims, agree = {}, []
        for _ in range(reps):
            ids = batch_ids(batch)
            first = {}
            for name, (_, url, _) in servers.items():
                t0 = time.perf_counter()
                r = post(url + "/v1/embeddings", {"model": ids_of[name], "input": ids})
                times[name].append(time.perf_counter() - t0)
                if len(r["data"]) != batch:
                    sys.exit(f"{name}: {len(r['data'])} embeddings for {batch} inputs")
                dims[name] = len(r["data"][0]["embedding"])
                first[name] = r["data"][0]["embedding"]
            a, b = first["lem"], first["llama.cpp"]
            if len(a) == len(b):
                dot = sum(x * y for x, y in zip(a, b))
                agree.append(dot / (sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5)
        load = os.getloadavg()
        print(f"model {os.path.basename(model)}: {batch} inputs x {tokens} tokens in one request, {threads} threads each, "
              f"{reps} repetitions; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
        med = {}
        for name, ts in times.items():
            med[name] = statistics.median(ts)
            best = min(ts)
            print(f"{name:10s} dim {dims[name]:5d}  median {med[name]:7.2f}s  {batch / med[name]:7.2f} inputs/s  "
                  f"{batch * tokens / med[name]:8.1f} tokens/s   (best {batch / best:.2f} inputs/s, {batch * tokens / best:.1f} tokens/s)")
        print(f"lem / llama.cpp throughput (medians): {med['llama.cpp'] / med['lem']:.2f}")
        if agree:
            print(f"cosine of the engines' embeddings of the same input: min {min(agree):.5f}")
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
