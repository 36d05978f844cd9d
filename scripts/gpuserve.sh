#!/usr/bin/env bash
# gpuserve.sh measures the many-users goals on a GPU: llama-3.1-8b's
# geometry in bf16 (`lem synth`), one stream through a session and through
# the scheduler, then `lem serve` driven by `lem load` at 1, 64 and 256
# concurrent streams with prompts of about 512 tokens and 256 output tokens.
#
# Settings (environment):
#   LEM      lem binary (default `lem` on PATH)
#   MODEL    model folder (default /tmp/m8, made with `lem synth --like
#            llama-3.1-8b --dtype bf16` when missing)
#   LOADS    concurrent streams of the serve runs (default "1 64 256")
#   DEVICE   lem's --device (default cuda); KV its --kv-memory (default 48GiB)
#   CTX      lem serve's --ctx (default 2048; 0: the model's trained length)
#   ENVS     lem settings to compare, space-separated, each a comma-separated
#            list of VAR=value (default "-": as built), e.g.
#            "- LEM_SCHED_AHEAD=0,LEM_CUDA_PAGED_SPAN=256"
#
# Example: LOADS=1 ENVS="- LEM_SCHED_AHEAD=0" scripts/gpuserve.sh
set -u
LEM=${LEM:-lem}
MODEL=${MODEL:-/tmp/m8}
LOADS=${LOADS:-1 64 256}
ENVS=${ENVS:--}
DEVICE=${DEVICE:-cuda}
KV=${KV:-48GiB}
CTX=${CTX:-2048}
PORT=36911
[ -d "$MODEL" ] || "$LEM" synth --like llama-3.1-8b --dtype bf16 -o "$MODEL" | tail -1

# with SETTINGS CMD...: runs CMD with the comma-separated settings.
with() {
	local s=$1
	shift
	if [ "$s" = - ]; then
		"$@"
	else
		env ${s//,/ } "$@"
	fi
}

for e in $ENVS; do
	echo "## settings: $e"
	with "$e" "$LEM" bench "$MODEL" --device "$DEVICE" -p 0 -n 128 -d 512 -r 2 2>&1 | grep -E 't/s$'
	with "$e" "$LEM" bench "$MODEL" --device "$DEVICE" -npl 1 -p 512 -n 128 2>&1 | grep -E '^\| *[0-9]'
	(
		[ "$e" = - ] || export ${e//,/ }
		exec "$LEM" serve "$MODEL" --device "$DEVICE" --model-alias m --addr "127.0.0.1:$PORT" \
			--parallel 256 --ctx "$CTX" --kv-memory "$KV" --max-queue 1024 >/dev/null 2>&1
	) &
	pid=$!
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
		sleep 0.2
	done
	for c in $LOADS; do
		n=$((2 * c))
		out=256
		if [ "$c" = 1 ]; then
			n=4
			out=128
		fi
		echo "## settings: $e; $c at once"
		"$LEM" load --url "http://127.0.0.1:$PORT" --model m -c "$c" -n "$n" --endpoint completions \
			--prompt-tokens 220 --output-tokens "$out" 2>&1 | tail -8
	done
	kill "$pid"
	wait "$pid" 2>/dev/null
done
