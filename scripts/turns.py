#!/usr/bin/env python3
"""Measures prefix caching over interleaved multi-turn conversations.

C conversations of T turns each share one system prompt of S tokens (random
common words, one token each in current vocabularies). Turns are sent
round-robin, conversation after conversation, K at a time, so that the
conversations interleave in the server's cache as many users' would; each
turn's request carries the whole history (system prompt, earlier user
messages and the server's earlier answers) and asks for O tokens.

For each turn number it prints the median over conversations of the prompt
tokens, the prompt tokens the server reports as cached
(usage.prompt_tokens_details.cached_tokens), the prompt tokens actually
computed (the difference) and the latency to the first token, and the ratio
of the last turn's to the first turn's latency.

  scripts/turns.py URL [C T S O K]      (defaults 16 10 2000 32 4)

URL is an OpenAI-compatible server's base URL (lem serve, llama-server
started with enough context). Standard library only.
"""
import http.client, json, random, statistics, sys, threading, time, urllib.parse

WORDS = ("time year people way day man thing woman life child world school state family student group country "
         "problem hand part place case week company system program question work government number night point "
         "home water room mother area money story fact month lot right study book eye job word business issue side "
         "kind head house service friend father power hour game line end member law car city community name").split()


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def chat(url, model, messages, out):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = json.dumps({"model": model, "messages": messages, "max_tokens": out, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.time()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    ttft, text, usage = None, [], {}
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for c in ev.get("choices", []):
            d = c.get("delta", {}).get("content")
            if d:
                if ttft is None:
                    ttft = time.time() - t0
                text.append(d)
        if ev.get("usage"):
            usage = ev["usage"]
    conn.close()
    return "".join(text), ttft if ttft is not None else time.time() - t0, usage


def main():
    url = sys.argv[1].rstrip("/")
    C, T, S, O, K = (int(a) for a in (sys.argv[2:7] + ["16", "10", "2000", "32", "4"][len(sys.argv[2:7]):]))
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("GET", "/v1/models")
    model = json.loads(conn.getresponse().read())["data"][0]["id"]
    rng = random.Random(1)
    system = words(rng, S)
    convs = [[{"role": "system", "content": system}] for _ in range(C)]
    stats = [[] for _ in range(T)]  # per turn: (prompt, cached, ttft)
    lock = threading.Lock()
    for t in range(T):
        todo = list(range(C))
        def worker():
            while True:
                with lock:
                    if not todo:
                        return
                    c = todo.pop(0)
                    convs[c].append({"role": "user", "content": words(random.Random(c * 1000 + t), 24)})
                    msgs = list(convs[c])
                text, ttft, usage = chat(url, model, msgs, O)
                p = usage.get("prompt_tokens", 0)
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                with lock:
                    convs[c].append({"role": "assistant", "content": text})
                    stats[t].append((p, cached, ttft))
        ths = [threading.Thread(target=worker) for _ in range(K)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
    print(f"{C} conversations x {T} turns, {S}-token system prompt, {O} output tokens, {K} in flight")
    print(f"{'turn':>4} {'prompt':>7} {'cached':>7} {'computed':>8} {'ttft_ms':>8}")
    med = lambda xs: statistics.median(xs)
    first = None
    for t, rows in enumerate(stats):
        p, c, f = med([r[0] for r in rows]), med([r[1] for r in rows]), med([r[2] for r in rows])
        comp = med([r[0] - r[1] for r in rows])
        first = first or f
        print(f"{t + 1:>4} {p:>7.0f} {c:>7.0f} {comp:>8.0f} {1000 * f:>8.1f}")
    print(f"turn {T} / turn 1 time to first token: {med([r[2] for r in stats[-1]]) / first:.2f}")


if __name__ == "__main__":
    main()
