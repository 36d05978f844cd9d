#!/usr/bin/env bash
# sidebyside.sh measures lem against llama.cpp on the same quantized GGUF
# files, on the same pinned cores, in one run.
#
# For each model geometry it writes random bf16 weights with `lem synth`,
# quantizes them with `lem quant --gguf TYPE`, and for each file runs
# `lem bench` and llama.cpp's `llama-bench`, prefill (ppN) and decode (tgN),
# alternating the engines. It needs no Go: only a lem binary, llama-bench
# and python3 (for the table).
#
# Decode GB/s is the bytes a token reads (lem bench's
# weight_bytes_per_token, the same file for both engines) times tokens per
# second; % is that against the streaming-read bandwidth lem bench measures
# with the same threads on the same cores right after each of its tests and
# decode repetitions (the highest of the file's measurements). "% paired" is
# lem bench's paired_bandwidth_pct: each of lem's decode repetitions against
# the bandwidth measured right after it, averaged.
# lem RSS/file is lem bench's peak resident set over the file's weight bytes.
#
# Settings (environment):
#   LEM        lem binary (default: .gpu/bin/lem.xz or .gpu/qbench/lem.xz
#              unpacked, else `lem` on PATH)
#   LLAMA_DIR  folder with llama-bench and its libraries (default:
#              .gpu/llamacpp.tar.xz unpacked to /tmp/llama)
#   MODELS     synth geometries   (default "llama-3.2-1b qwen2.5-0.5b")
#   TYPES      lem quant types    (default "q4_0 q8_0 q4_k_m")
#   PP, TG     prompt and decode lengths (default 512, 128)
#   REPS       repetitions per test (default 2)
#   CPUS       cores to pin to    (default 2,3); THREADS (default 2)
#   MEMBUF     MiB lem bench streams for the bandwidth (default 2048, well
#              above the device host's 300 MiB L3)
#   WORK       scratch folder     (default /tmp/sidebyside; files are reused)
#   BUDGET     seconds; 0: none. A file is skipped when the time so far plus
#              the slowest file so far would pass it, so that a run under a
#              time limit still ends with its table.
#   TABLE_ONLY set to 1 to print the table of the results under WORK only.
#
# Example: MODELS=qwen2.5-0.5b TYPES=q4_0 PP=64 TG=16 REPS=1 scripts/sidebyside.sh
set -u

MODELS=${MODELS:-"llama-3.2-1b qwen2.5-0.5b"}
TYPES=${TYPES:-"q4_0 q8_0 q4_k_m"}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-2}
CPUS=${CPUS:-2,3}
THREADS=${THREADS:-2}
MEMBUF=${MEMBUF:-2048}
WORK=${WORK:-/tmp/sidebyside}
BUDGET=${BUDGET:-0}
RES=$WORK/results
mkdir -p "$WORK" "$RES"
start=$(date +%s)
elapsed() { echo $(($(date +%s) - start)); }
log() { echo "[$(elapsed)s] $*"; }

table() {
	python3 - "$RES" "$PP" "$TG" <<'EOF'
import json, os, sys
res, pp, tg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(name):
    try:
        with open(os.path.join(res, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def avg(samples):
    if not samples:
        return None, None
    m = sum(samples) / len(samples)
    sd = (sum((x - m) ** 2 for x in samples) / (len(samples) - 1)) ** 0.5 if len(samples) > 1 else 0.0
    return m, sd
files = sorted({n.rsplit(".", 3)[0] for n in os.listdir(res) if n.endswith(".json")})
rows = []
bws = []
for base in files:
    model, typ = base.split("@")
    lem = {t: load(f"{base}.lem.{t}.json") for t in ("pp", "tg")}
    lcp = {t: load(f"{base}.llama.{t}.json") for t in ("pp", "tg")}
    per_tok = next((r["weight_bytes_per_token"] for r in lem.values() if r), None)
    bw = max((r["mem_bandwidth_gbs"] for r in lem.values() if r), default=None)
    rss = max((r["peak_rss_bytes"] / r["size_bytes"] for r in lem.values() if r and r.get("size_bytes")), default=None)
    if bw:
        bws.append(bw)
    def lem_ts(t):
        r = lem[t]
        if not r or not r.get("tests"):
            return None, None
        return avg(r["tests"][0]["samples_ts"])
    def llama_ts(t):
        r = lcp[t]
        if not r:
            return None, None
        return avg(r[0]["samples_ts"])
    got = {"lem": (lem_ts("pp"), lem_ts("tg")), "llama.cpp": (llama_ts("pp"), llama_ts("tg"))}
    for eng in ("lem", "llama.cpp"):
        (p, psd), (g, gsd) = got[eng]
        gbs = g * per_tok / 1e9 if g and per_tok else None
        pct = 100 * gbs / bw if gbs and bw else None
        ratio = ["", ""]
        if eng == "lem":
            for i in (0, 1):
                a, b = got["lem"][i][0], got["llama.cpp"][i][0]
                ratio[i] = f"{a / b:.2f}" if a and b else ""
        paired = None
        if eng == "lem" and lem["tg"] and lem["tg"].get("tests"):
            paired = lem["tg"]["tests"][0].get("paired_bandwidth_pct")
        rows.append([model, typ.upper(), eng,
                     f"{p:.2f} ± {psd:.2f}" if p else "",
                     f"{g:.2f} ± {gsd:.2f}" if g else "",
                     f"{gbs:.2f}" if gbs else "",
                     f"{pct:.1f}%" if pct else "",
                     f"{paired:.1f}%" if paired else "",
                     ratio[0], ratio[1],
                     f"{per_tok / 2**20:.0f} MiB" if per_tok and eng == "lem" else "",
                     f"{bw:.2f}" if bw and eng == "lem" else "",
                     f"{rss:.2f}" if rss and eng == "lem" else ""])
head = ["model", "type", "engine", f"pp{pp} t/s", f"tg{tg} t/s", "decode GB/s", "% of mem bw", "% paired",
        "pp lem/llama", "tg lem/llama", "read/token", "mem bw GB/s", "lem RSS/file"]
right = [False, False, False] + [True] * 10
w = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
def line(r):
    return "| " + " | ".join(c.rjust(w[i]) if right[i] else c.ljust(w[i]) for i, c in enumerate(r)) + " |"
print(line(head))
print("| " + " | ".join(("-" * (w[i] - 1) + ":") if right[i] else "-" * w[i] for i in range(len(head))) + " |")
for r in rows:
    print(line(r))
if bws:
    print(f"\nmemory bandwidth (lem bench streaming read, same threads and cores): {min(bws):.2f}–{max(bws):.2f} GB/s over {len(bws)} files")
EOF
}

if [ "${TABLE_ONLY:-}" = 1 ]; then
	table
	exit
fi

# The lem binary: the merged build the coordinator drops, else ours.
if [ -z "${LEM:-}" ]; then
	for x in .gpu/bin/lem.xz .gpu/qbench/lem.xz; do
		if [ -f "$x" ]; then
			xz -dc "$x" >/tmp/lem-sbs && chmod +x /tmp/lem-sbs && LEM=/tmp/lem-sbs && log "lem from $x"
			break
		fi
	done
fi
LEM=${LEM:-lem}
if [ -z "${LLAMA_DIR:-}" ]; then
	LLAMA_DIR=/tmp/llama
	if [ ! -x $LLAMA_DIR/llama-bench ] && [ -f .gpu/llamacpp.tar.xz ]; then
		mkdir -p $LLAMA_DIR && tar -xJf .gpu/llamacpp.tar.xz -C $LLAMA_DIR
	fi
fi
export LD_LIBRARY_PATH=$LLAMA_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BENCH=$LLAMA_DIR/llama-bench
for b in "$LEM" "$BENCH"; do
	command -v "$b" >/dev/null || { echo "sidebyside: $b not found" >&2; exit 1; }
done

echo "== host"
lscpu | grep -E '^(Model name|Socket|Core|Thread|CPU\(s\)|NUMA node|L[123]|CPU max MHz)'
echo "SIMD: $(grep -o -w 'avx2\|fma\|f16c\|avx512[a-z_0-9]*\|avx_vnni\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
free -g | head -2
echo "lem: $("$LEM" --version 2>&1 | head -1)"
echo "settings: MODELS='$MODELS' TYPES='$TYPES' PP=$PP TG=$TG REPS=$REPS CPUS=$CPUS THREADS=$THREADS MEMBUF=$MEMBUF BUDGET=$BUDGET"

# runpair runs one test (pp or tg) of one file with both engines, in the
# order given.
runpair() { # file base test first second
	local f=$1 base=$2 t=$3 e p n
	if [ "$t" = pp ]; then p=$PP n=0; else p=0 n=$TG; fi
	for e in $4 $5; do
		if [ "$e" = lem ]; then
			taskset -c "$CPUS" "$LEM" bench "$f" --device cpu --threads "$THREADS" -p $p -n $n -r "$REPS" --mem-buffer "$MEMBUF" --json \
				>"$RES/$base.lem.$t.json" 2>"$WORK/$base.lem.$t.log" ||
				{ log "lem bench $base $t failed:"; tail -5 "$WORK/$base.lem.$t.log"; rm -f "$RES/$base.lem.$t.json"; }
		else
			taskset -c "$CPUS" "$BENCH" -m "$f" -t "$THREADS" -p $p -n $n -r "$REPS" -o json \
				>"$RES/$base.llama.$t.json" 2>"$WORK/$base.llama.$t.log" ||
				{ log "llama-bench $base $t failed:"; tail -5 "$WORK/$base.llama.$t.log"; rm -f "$RES/$base.llama.$t.json"; }
		fi
	done
}

slowest=0
flip=0
for m in $MODELS; do
	src=$WORK/$m
	if [ ! -f "$src/model.safetensors" ] && [ ! -f "$src/model.safetensors.index.json" ]; then
		log "synth $m"
		"$LEM" synth --like "$m" --dtype bf16 -o "$src" | tail -1 || exit 1
	fi
	for t in $TYPES; do
		base=$m@$t
		f=$WORK/$m.$t.gguf
		if [ "$BUDGET" -gt 0 ] && [ $(($(elapsed) + slowest)) -gt "$BUDGET" ]; then
			log "skip $base: ${slowest}s would pass the budget of ${BUDGET}s"
			continue
		fi
		t0=$(date +%s)
		if [ ! -f "$f" ]; then
			"$LEM" quant "$src" --gguf "$t" -o "$f.tmp" 2>/dev/null && mv "$f.tmp" "$f" || { log "quant $base failed"; continue; }
		fi
		# Alternate: lem first on one file, llama.cpp first on the next,
		# and within a file the other order for decode than for prefill.
		if [ $flip = 0 ]; then a=lem b=llama; else a=llama b=lem; fi
		flip=$((1 - flip))
		log "$base: pp ($a, $b), tg ($b, $a)"
		runpair "$f" "$base" pp $a $b
		runpair "$f" "$base" tg $b $a
		d=$(($(date +%s) - t0))
		[ $d -gt $slowest ] && slowest=$d
		log "$base done in ${d}s"
		# The table so far, in case a time limit ends the run.
		table | grep -F "| $m " | grep -F "| ${t^^} "
	done
done
grep -h 'load_backend\|CPU_REPACK\|AARCH64\|AMX' "$WORK"/*.llama.*.log 2>/dev/null | sort -u | head -5
echo "== results ($(elapsed)s)"
table
