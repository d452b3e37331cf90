#!/usr/bin/env bash
# The context-extension study's driver (experiments/extension/run_study.sh) end to end on one tiny
# cell: a 2-step vanilla base at 192 tokens, its raw evaluation, and a 2-step YaRN + SSA
# fine-tune at 2x, each scored (needle and multi-key grids, held-out evaluations at 1x..8x) into
# one JSON line; a second call reruns nothing, and a bad argument is refused before anything is
# written.
# Usage: extension_study_smoke_test.sh KELVIN SOURCE_DIR
set -u
kelvin=$1 source_dir=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
study() {
  bash "$source_dir/experiments/extension/run_study.sh" --kelvin "$kelvin" --out "$dir/runs" \
    --results "$dir/study.jsonl" --variants raw,yarn_ssa --seeds 3 \
    --factors 2 --base-steps 2 --ext-steps 2 --step-tokens 768 --micro-tokens 384 \
    --needle-samples 1 --task-samples 1 --heldout-rows 8 "$@"
}
study > "$dir/first.log" 2>&1 || fail "the study failed: $(cat "$dir/first.log")"
[[ $(wc -l < "$dir/study.jsonl") -eq 2 ]] || fail "expected 2 lines: $(cat "$dir/study.jsonl")"
raw=$(grep -F '{"variant": "raw", "factor": 1, "seed": 3,' "$dir/study.jsonl")
yarn=$(grep -F '{"variant": "yarn_ssa", "factor": 2, "seed": 3,' "$dir/study.jsonl")
[[ -n "$raw" && -n "$yarn" ]] || fail "a line is missing: $(cat "$dir/study.jsonl")"
for field in '"base_length": 192' '"kelvin": "kelvin ' '"base_kelvin": "kelvin ' ';OpenBLAS ' \
  '"needle": {' \
  '"lengths": [ 192, 384, 768, 1536 ]' '"multikey": {' '"task": "multikey"' '"heldout": {"192": {' \
  '"1536": {' '"passkey_retrieval":' '"base_metrics": [{"step":'; do
  [[ "$raw" == *"$field"* ]] || fail "the raw line lacks $field"
  [[ "$yarn" == *"$field"* ]] || fail "the yarn_ssa line lacks $field"
done
[[ "$raw" == *'"ext_tokens": 0,'* ]] || fail "the raw line has a fine-tune"
[[ "$yarn" == *'"length": 384, "ext_steps": 2, "ext_tokens": 1536,'* ]] ||
  fail "the yarn_ssa line's budget is wrong: $yarn"
[[ "$yarn" == *'"temperatures": ['* && "$yarn" == *'"ssa/layer_0/sigma_alpha_min":'* ]] ||
  fail "the yarn_ssa line has no temperatures"
[[ "$raw" == *'"temperatures": ['* ]] && fail "the vanilla raw line has temperatures"
grep -qF 'rope_type: "yarn"' "$dir/runs/x2/yarn_ssa/seed3/resolved_config.textproto" ||
  fail "the fine-tune did not run with YaRN"
before=$(stat -c %Y "$dir/runs/x2/yarn_ssa/seed3/train.log")
study > "$dir/second.log" 2>&1 || fail "the second call failed: $(cat "$dir/second.log")"
[[ $(wc -l < "$dir/study.jsonl") -eq 2 ]] || fail "the second call added lines"
grep -q " done$" "$dir/second.log" && fail "the second call reran: $(cat "$dir/second.log")"
[[ $(stat -c %Y "$dir/runs/x2/yarn_ssa/seed3/train.log") == "$before" ]] || fail "retrained"
study --out "$dir/refused" --results "$dir/refused/study.jsonl" --variants yarn,longrope \
  > "$dir/refused.log" 2>&1 && fail "an unknown variant was accepted"
grep -qF "unknown variant longrope" "$dir/refused.log" ||
  fail "no message: $(cat "$dir/refused.log")"
[[ -e "$dir/refused" ]] && fail "a refused call left $dir/refused"
[[ $failed == 0 ]] && echo "extension study smoke test passed"
exit $failed
