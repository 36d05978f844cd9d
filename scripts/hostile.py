#!/usr/bin/env python3
"""Measures how `lem serve` holds up against two hostile loads.

burst: N concurrent chat requests of 15 MiB each (all too long for the
context); prints the server's resident memory before, at its peak and
after the burst.

leave: a client streams a long completion prompt and leaves 0.5 s into
its prefill while a second request waits in the queue; prints how long
after the disconnect the waiting request got its first token.

  scripts/hostile.py burst LEM MODEL [N]
  scripts/hostile.py leave LEM MODEL [PROMPT_TOKENS]

LEM is a lem binary, MODEL what `lem serve` takes. The server runs on a
free loopback port with a 4096-token context. Standard library only.
"""
import http.client, json, random, socket, subprocess, sys, threading, time, urllib.request

CAP_MIB = 6144  # the burst stops the server beyond this resident size


def start(lem, model):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = subprocess.Popen([lem, "serve", model, "--model-alias", "m", "--addr", f"127.0.0.1:{port}", "--ctx", "4096",
                          "--max-queue", "64"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return p, port
        except Exception:
            time.sleep(0.1)
    p.kill()
    sys.exit("the server did not start")


def rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        return None


def post(port, path, body, timeout=900):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body, {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    except Exception as e:
        return -1, str(e).encode()
    finally:
        c.close()


def burst(lem, model, n=16):
    p, port = start(lem, model)
    chat = lambda content, k: json.dumps({"model": "m", "max_tokens": k, "messages": [{"role": "user", "content": content}]}).encode()
    post(port, "/v1/chat/completions", chat("hello", 2))
    time.sleep(2)
    base = rss(p.pid)
    body = chat(("lorem ipsum dolor sit amet, consectetur adipiscing elit; " * 300000)[:15 << 20], 4)
    peak, done, killed = [base], [False], [False]

    def sample():
        while not done[0]:
            r = rss(p.pid)
            if r is None:
                return
            peak[0] = max(peak[0], r)
            if r > CAP_MIB:
                killed[0] = True
                p.kill()
                return
            time.sleep(0.01)

    threading.Thread(target=sample, daemon=True).start()
    statuses = []
    t0 = time.time()
    ts = [threading.Thread(target=lambda: statuses.append(post(port, "/v1/chat/completions", body)[0])) for _ in range(n)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    done[0] = True
    print(f"{n} x {len(body) / 2**20:.1f} MiB in {time.time() - t0:.1f} s, statuses {sorted(set(statuses))}")
    print(f"resident: before {base:.0f} MiB, peak {peak[0]:.0f} MiB" + (f" (stopped beyond {CAP_MIB} MiB)" if killed[0] else ""))
    if not killed[0]:
        for after in (1, 5, 10, 30):
            time.sleep(after - (0 if after == 1 else last))
            last = after
            print(f"  {after:>2} s after: {rss(p.pid):.0f} MiB")
    p.kill()


def first_token(port, body, out, started=None):
    """Streams body to /v1/completions and stores when the first token came."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if started:
        started.set()
    for line in r:
        if line.startswith(b"data: {"):
            out.append(time.time())
            break
    c.close()


def leave(lem, model, n=2899):
    p, port = start(lem, model)
    vocab = json.load(open(model + "/config.json"))["vocab_size"] if not model.endswith(".gguf") else 32000
    rng = random.Random(1)
    ids = lambda k: [rng.randrange(1000, min(vocab, 30000)) for _ in range(k)]
    completion = lambda prompt, k: json.dumps({"model": "m", "prompt": prompt, "max_tokens": k, "stream": True}).encode()
    post(port, "/v1/completions", json.dumps({"model": "m", "prompt": ids(300), "max_tokens": 1}).encode())  # warm up
    a = socket.create_connection(("127.0.0.1", port))
    body = completion(ids(n), 8)
    a.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    a.recv(1)  # A's headers: it holds the model
    got = []
    b = threading.Thread(target=first_token, args=(port, completion(ids(16), 1), got))
    b.start()
    time.sleep(0.5)
    left = time.time()
    a.close()
    b.join()
    print(f"prompt of {n} tokens; the waiting request's first token came {got[0] - left:.2f} s after the client left")
    p.kill()


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] not in ("burst", "leave"):
        sys.exit(__doc__)
    {"burst": burst, "leave": leave}[sys.argv[1]](sys.argv[2], sys.argv[3], *map(int, sys.argv[4:]))
