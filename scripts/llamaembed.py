#!/usr/bin/env python3
"""Embeddings of texts from llama.cpp's llama-server, for checking lem's GGUF
encoder files against llama.cpp.

    scripts/llamaembed.py --server BUILD/bin/llama-server --model FILE.gguf TEXT...

starts `llama-server --embeddings --pooling cls` on a free loopback port,
posts the texts to /v1/embeddings in one request and prints one embedding a
line (space-separated floats), in the order of the texts. With --lem LEM it
also serves the file with `LEM serve` and prints, instead, the cosine and
the largest absolute difference of each pair of embeddings.
LD_LIBRARY_PATH gets the server's directory, where a native build keeps
its libraries.
"""
import argparse, json, math, os, socket, subprocess, sys, time, urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(port, proc, what):
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return
        except Exception:
            time.sleep(0.2)
    sys.exit(f"{what} did not become healthy")


def embed(port, texts):
    body = json.dumps({"input": texts, "model": "m"}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", data=body,
                                 headers={"Content-Type": "application/json"})
    data = json.load(urllib.request.urlopen(req, timeout=120))["data"]
    return [d["embedding"] for d in sorted(data, key=lambda d: d["index"])]


def serve(cmd, port, what):
    env = dict(os.environ)
    if what == "llama-server":
        lib = os.path.dirname(os.path.abspath(cmd[0]))
        env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wait(port, proc, what)
    return proc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--lem")
    ap.add_argument("texts", nargs="+")
    a = ap.parse_args()
    procs = []
    try:
        port = free_port()
        procs.append(serve([a.server, "-m", a.model, "--embeddings", "--pooling", "cls",
                            "--host", "127.0.0.1", "--port", str(port), "-t", "1"], port, "llama-server"))
        ref = embed(port, a.texts)
        if not a.lem:
            for v in ref:
                print(" ".join(repr(x) for x in v))
            return
        port2 = free_port()
        procs.append(serve([a.lem, "serve", a.model, "--addr", f"127.0.0.1:{port2}"], port2, "lem"))
        got = embed(port2, a.texts)
        for t, x, y in zip(a.texts, ref, got):
            cos = sum(p * q for p, q in zip(x, y)) / math.sqrt(sum(p * p for p in x) * sum(q * q for q in y))
            print(f"{cos:.7f} {max(abs(p - q) for p, q in zip(x, y)):.3g} {t!r}")
    finally:
        for p in procs:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
