#!/usr/bin/env bash
# Compares two lem binaries on the same models, alternating them ROUNDS
# times so that the machine's drift falls on both: prints each round's
# prefill and decode tokens/s and the new/old ratios of their medians.
#
#   scripts/ab.sh OLD_LEM NEW_LEM MODEL... [-- lem bench flags]
#
# Default bench flags: -p 128 -n 32 -r 2 --device cpu. ROUNDS (default 3).
set -euo pipefail
old=$1 new=$2
shift 2
models=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do models+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
flags=("$@")
[ ${#flags[@]} -eq 0 ] && flags=(-p 128 -n 32 -r 2 --device cpu)
rounds=${ROUNDS:-3}
# rates BIN MODEL: "prefill decode" tokens/s from lem bench --json.
rates() {
  "$1" bench "$2" "${flags[@]}" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
tests = d.get("tests", d.get("results", []))
pp = [t["avg_ts"] for t in tests if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0]
tg = [t["avg_ts"] for t in tests if t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0]
print(pp[0] if pp else 0, tg[0] if tg else 0)'
}
for m in "${models[@]}"; do
  echo "== $m (${flags[*]})"
  o_pp=() o_tg=() n_pp=() n_tg=()
  for r in $(seq "$rounds"); do
    read -r a b < <(rates "$old" "$m"); o_pp+=("$a"); o_tg+=("$b")
    read -r c d < <(rates "$new" "$m"); n_pp+=("$c"); n_tg+=("$d")
    printf 'round %d  old pp %8.2f tg %7.2f   new pp %8.2f tg %7.2f\n' "$r" "$a" "$b" "$c" "$d"
  done
  python3 - "${o_pp[*]}" "${o_tg[*]}" "${n_pp[*]}" "${n_tg[*]}" <<'PY'
import statistics as s, sys
op, ot, np_, nt = ([float(x) for x in a.split()] for a in sys.argv[1:5])
ratio = lambda new, old: f"{s.median(new) / s.median(old):.3f}" if s.median(old) else "-"
print(f"median  old pp {s.median(op):8.2f} tg {s.median(ot):7.2f}   new pp {s.median(np_):8.2f} tg {s.median(nt):7.2f}"
      f"   new/old pp {ratio(np_, op)} tg {ratio(nt, ot)}")
PY
done
