#!/usr/bin/env bash
# batched.sh measures lem against llama.cpp with many sequences at once, on
# the same GGUF files, on the same pinned cores, engines alternating.
#
# Two measurements per file:
#   bench  `lem bench FILE -npl NPL -p PP -n TG` against llama.cpp's
#          `llama-batched-bench -npl NPL -npp PP -ntg TG` (aggregate
#          prefill and decode tokens/s, S_PP and S_TG).
#   serve  `lem serve FILE --parallel N` against `llama-server -m FILE -np N`
#          (continuous batching on), both driven by `lem load` with N
#          concurrent streaming clients, 4·N requests of PP prompt and TG
#          output tokens each (output tokens/s, TTFT and ITL percentiles).
# Files are made with `lem synth --like MODEL --dtype bf16` and
# `lem quant --gguf TYPE`, as scripts/sidebyside.sh makes them.
#
# Settings (environment):
#   LEM        lem binary (default `lem` on PATH)
#   LLAMA_DIR  folder with llama-batched-bench, llama-server and their
#              libraries (a native build: cmake -DGGML_NATIVE=ON)
#   MODELS     synth geometries   (default "llama-3.2-1b qwen2.5-0.5b")
#   TYPES      lem quant types    (default "q4_0 q4_k_m")
#   NPL        sequences at once  (default 1,4,8,16)
#   PP, TG     prompt and generated tokens per sequence (default 128, 64)
#   SERVE_NP   --parallel / -np values for the serve runs (default "1 8";
#              empty: no serve runs)
#   CPUS       cores to pin to    (default 0,1); THREADS (default 2)
#   WORK       scratch folder     (default /tmp/batched; files are reused)
#
# Example: MODELS=qwen2.5-0.5b TYPES=q4_0 NPL=1,8 SERVE_NP= scripts/batched.sh
set -u
LEM=${LEM:-lem}
LLAMA_DIR=${LLAMA_DIR:?set LLAMA_DIR to a folder with llama-batched-bench and llama-server}
MODELS=${MODELS:-"llama-3.2-1b qwen2.5-0.5b"}
TYPES=${TYPES:-"q4_0 q4_k_m"}
NPL=${NPL:-1,4,8,16}
PP=${PP:-128}
TG=${TG:-64}
SERVE_NP=${SERVE_NP-"1 8"}
CPUS=${CPUS:-0,1}
THREADS=${THREADS:-2}
WORK=${WORK:-/tmp/batched}
mkdir -p "$WORK"
export LD_LIBRARY_PATH=$LLAMA_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
pin() { taskset -c "$CPUS" "$@"; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_up() {
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	return 1
}
ctx=$((2 * PP + TG + 64))
for m in $MODELS; do
	src=$WORK/$m-bf16
	[ -d "$src" ] || "$LEM" synth --like "$m" --dtype bf16 -o "$src" | tail -1
	for t in $TYPES; do
		f=$WORK/$m-$t.gguf
		[ -f "$f" ] || "$LEM" quant "$src" --gguf "$t" -o "$f" 2>/dev/null | tail -1
		echo "## $m $t: bench (PP $PP, TG $TG, 2 threads)"
		pin "$LEM" bench "$f" -npl "$NPL" -p "$PP" -n "$TG" --threads "$THREADS" 2>/dev/null | grep '^|'
		pin "$LLAMA_DIR/llama-batched-bench" -m "$f" -c $((ctx * 64)) -b 2048 -ub 512 -npp "$PP" -ntg "$TG" \
			-npl "$NPL" -t "$THREADS" -tb "$THREADS" 2>/dev/null | grep '^|'
		for np in $SERVE_NP; do
			for eng in lem llama; do
				p=$(port)
				if [ $eng = lem ]; then
					pin "$LEM" serve "$f" --model-alias m --addr "127.0.0.1:$p" --parallel "$np" \
						--ctx "$ctx" --threads "$THREADS" >/dev/null 2>&1 &
				else
					pin "$LLAMA_DIR/llama-server" -m "$f" --alias m --port "$p" -np "$np" -c $((ctx * np)) \
						-t "$THREADS" -tb "$THREADS" -cb >/dev/null 2>&1 &
				fi
				pid=$!
				if wait_up "$p"; then
					echo "## $m $t: serve, $eng, $np at once"
					"$LEM" load --url "http://127.0.0.1:$p" --model m -c "$np" -n $((4 * np)) \
						--prompt-tokens "$PP" --output-tokens "$TG" --endpoint completions 2>&1 | tail -8
				else
					echo "## $m $t: $eng server did not start"
				fi
				kill "$pid"
				wait "$pid" 2>/dev/null
			done
		done
	done
done
