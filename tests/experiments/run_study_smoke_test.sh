#!/usr/bin/env bash
# The SSA study's driver (experiments/ssa/run_study.sh) end to end on its 2-step smoke task: two
# variants trained and scored on the needle grid, one JSON line each with the run's identity, its
# metrics (SSA temperatures in the SSA run's) and its grid; a second call reruns nothing.
# Usage: run_study_smoke_test.sh KELVIN SOURCE_DIR
set -u
kelvin=$1 source_dir=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
study() {
  bash "$source_dir/experiments/ssa/run_study.sh" --kelvin "$kelvin" --out "$dir/runs" \
    --results "$dir/study.jsonl" --tasks smoke --variants vanilla,ssa --seeds 3 --jobs 1 --threads 1
}
study > "$dir/first.log" 2>&1 || fail "the study failed: $(cat "$dir/first.log")"
[[ $(wc -l < "$dir/study.jsonl") -eq 2 ]] || fail "expected 2 lines: $(cat "$dir/study.jsonl")"
for variant in vanilla ssa; do
  line=$(grep -F "{\"task\": \"smoke\", \"variant\": \"$variant\", \"seed\": 3," "$dir/study.jsonl")
  [[ -n "$line" ]] || fail "no line for $variant"
  for field in '"steps": 2' '"train_seconds": ' '"kelvin": "kelvin ' ';OpenBLAS ' \
    '"eval/passkey_retrieval":' '"needle": {' '"lengths": [ 128 ]' '"by_length": ['; do
    [[ "$line" == *"$field"* ]] || fail "$variant's line lacks $field"
  done
done
grep -F '"variant": "ssa"' "$dir/study.jsonl" | grep -qF '"ssa/layer_0/' ||
  fail "the SSA run's metrics have no temperatures"
grep -F '"variant": "vanilla"' "$dir/study.jsonl" | grep -qF '"ssa/layer_0/' &&
  fail "the vanilla run's metrics have temperatures"
grep -F '"variant": "ssa"' "$dir/study.jsonl" | grep -qF '"temperatures": [' ||
  fail "the SSA run's needle grid has no temperature histograms"
before=$(stat -c %Y "$dir/runs/smoke/ssa/seed3/train.log")
study > "$dir/second.log" 2>&1 || fail "the second call failed: $(cat "$dir/second.log")"
[[ $(wc -l < "$dir/study.jsonl") -eq 2 ]] || fail "the second call added lines"
grep -q " done$" "$dir/second.log" && fail "the second call reran: $(cat "$dir/second.log")"
[[ $(stat -c %Y "$dir/runs/smoke/ssa/seed3/train.log") == "$before" ]] || fail "retrained"
[[ $failed == 0 ]] && echo "run_study smoke test passed"
exit $failed
