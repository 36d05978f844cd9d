#!/usr/bin/env python3
"""Soaks an OpenAI-compatible server with streaming clients that leave.

N clients loop for D seconds, each sending streaming chat requests of P
words (about P tokens) asking for O tokens; a request is abandoned at a
random point of its stream (the connection closed) with probability Q.
Every 10 s it samples the server's /metrics (process_resident_memory_bytes,
go_goroutines: lem serve exports both) and prints them; at the end it
prints the first and last samples, the requests completed and abandoned,
and the errors by kind (HTTP 429 counted apart: the queue refusing is
deliberate).

  scripts/soak.py URL [N D P O Q]    (defaults 64 600 64 64 0.3)

Standard library only.
"""
import http.client, json, random, re, sys, threading, time, urllib.parse

WORDS = ("time year people way day man thing woman life child world school state family student group country "
         "problem hand part place case week company system program question work government number night").split()


def metrics(u):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    get = lambda name: float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))
    return get("process_resident_memory_bytes") / 2**20, int(get("go_goroutines"))


def main():
    url = sys.argv[1].rstrip("/")
    a = sys.argv[2:7] + ["64", "600", "64", "64", "0.3"][len(sys.argv[2:7]):]
    N, D, P, O, Q = int(a[0]), float(a[1]), int(a[2]), int(a[3]), float(a[4])
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("GET", "/v1/models")
    model = json.loads(c.getresponse().read())["data"][0]["id"]
    counts = {"done": 0, "left": 0}
    errors = {}
    lock = threading.Lock()
    end = time.time() + D

    def client(i):
        rng = random.Random(i)
        while time.time() < end:
            prompt = " ".join(rng.choice(WORDS) for _ in range(P))
            leave = rng.random() < Q
            cut = rng.randint(0, O) if leave else -1
            try:
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
                conn.request("POST", "/v1/chat/completions", json.dumps({
                    "model": model, "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": O, "stream": True, "temperature": 0.7}), {"Content-Type": "application/json"})
                r = conn.getresponse()
                if r.status != 200:
                    r.read()
                    kind = f"http_{r.status}"
                    with lock:
                        errors[kind] = errors.get(kind, 0) + 1
                    conn.close()
                    time.sleep(0.2)
                    continue
                n, done = 0, False
                for line in r:
                    if line.startswith(b"data: [DONE]"):
                        done = True
                        break
                    if line.startswith(b"data: "):
                        n += 1
                        if n == cut:
                            break
                conn.close()
                with lock:
                    if done:
                        counts["done"] += 1
                    elif cut >= 0:
                        counts["left"] += 1
                    else:
                        errors["disconnect"] = errors.get("disconnect", 0) + 1
            except Exception as e:
                with lock:
                    k = type(e).__name__
                    errors[k] = errors.get(k, 0) + 1

    ths = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(N)]
    samples = [(0, *metrics(u))]
    print(f"{'s':>5} {'rss_mib':>8} {'goroutines':>10}")
    print(f"{0:>5} {samples[0][1]:>8.0f} {samples[0][2]:>10}")
    t0 = time.time()
    for th in ths:
        th.start()
    while time.time() < end:
        time.sleep(min(10, max(0, end - time.time())))
        s = (round(time.time() - t0), *metrics(u))
        samples.append(s)
        print(f"{s[0]:>5} {s[1]:>8.0f} {s[2]:>10}", flush=True)
    for th in ths:
        th.join()
    time.sleep(5)
    s = (round(time.time() - t0), *metrics(u))
    print(f"{s[0]:>5} {s[1]:>8.0f} {s[2]:>10}  (5 s after the last client)")
    print(f"requests completed {counts['done']}, abandoned {counts['left']}; errors {errors or 'none'}")
    print(f"resident MiB: first sample under load {samples[1][1]:.0f}, last {samples[-1][1]:.0f}; "
          f"goroutines: {samples[1][2]} -> {samples[-1][2]}, idle after {s[2]} (before {samples[0][2]})")


if __name__ == "__main__":
    main()
