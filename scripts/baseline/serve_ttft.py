# Time from `lem serve` start to the first streamed token.
import json, os, subprocess, sys, time, urllib.request
lem, model = sys.argv[1], sys.argv[2]
addr = "127.0.0.1:18431"
t0 = time.time()
p = subprocess.Popen([lem, "serve", model, "--device", "cuda", "--addr", addr, "--log-format", "text"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
body = json.dumps({"model": os.path.basename(model), "prompt": "Hello", "max_tokens": 8, "stream": True, "temperature": 0}).encode()
first = None
try:
    while time.time() - t0 < 60 and first is None:
        try:
            req = urllib.request.Request(f"http://{addr}/v1/completions", data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                for line in r:
                    if line.startswith(b"data:") and b"[DONE]" not in line:
                        first = time.time() - t0
                        break
        except Exception as e:
            if p.poll() is not None:
                break
            time.sleep(0.05)
finally:
    p.terminate()
    try:
        out, _ = p.communicate(timeout=10)
    except Exception:
        p.kill(); out, _ = p.communicate()
print(out[-3000:])
print(f"TTFT-RESULT serve start to first token: {first:.2f}s" if first else "TTFT-RESULT no token")
