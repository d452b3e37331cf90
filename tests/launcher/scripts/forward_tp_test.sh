#!/usr/bin/env bash
# kelvin generate, eval --data and eval --needle under mpirun split the model over the processes
# (tensor parallelism): 2 and 4 ranks generate the greedy tokens of one process from the same
# checkpoint (2 ranks also a --chat conversation piped to rank 0) and score a corpus to its loss
# (within f32 rounding), 2 ranks give one process's needle grid and temperature histograms, rank 0
# alone reports, and a process count the model does not divide by is refused naming it.
# Usage: forward_tp_test.sh KELVIN SOURCE_DIR MPIEXEC
set -u
kelvin=$1 source_dir=$2 mpiexec=$3
source "$source_dir/tests/testing/script_testing.sh"
job="$source_dir/configs/passkey_tiny_cpu.textproto"
"$kelvin" train "$job" --set training.steps=30 --set lr_schedule.warmup_steps=1 \
  --set training.eval_interval=0 --set training.export_hf_dir=\"\" \
  --set checkpoint.dir=\""$dir/ckpt"\" --set launch.run_dir=\""$dir/run"\" > "$dir/train.log" 2>&1 ||
  { tail -n 5 "$dir/train.log"; echo "FAIL: training the model"; exit 1; }
generate=(generate "$job" --set checkpoint.dir=\""$dir/ckpt"\" --tokens 1,2,3,4,5 --tokens 40,41
          --tokens 100,101,102,103,104,105,106 --max-new-tokens 16)
tokens() { sed -n 's/.*"tokens":\(\[[0-9,]*\]\).*/\1/p' "$1"; }
"$kelvin" "${generate[@]}" > "$dir/one.out" 2> "$dir/one.err" || fail "one process: $(tail -n 1 "$dir/one.err")"
[ "$(wc -l < "$dir/one.out")" -eq 3 ] || fail "one process printed $(wc -l < "$dir/one.out") lines, expected 3"
for np in 2 4; do
  "$mpiexec" -np "$np" --oversubscribe "$kelvin" "${generate[@]}" > "$dir/np$np.out" 2> "$dir/np$np.err" ||
    fail "$np ranks: $(grep 'kelvin:' "$dir/np$np.err" | head -n 1)"
  [ "$(wc -l < "$dir/np$np.out")" -eq 3 ] || fail "$np ranks printed $(wc -l < "$dir/np$np.out") lines, expected 3 (rank 0 alone)"
  [ "$(tokens "$dir/np$np.out")" = "$(tokens "$dir/one.out")" ] ||
    fail "$np ranks generated other tokens: $(tokens "$dir/np$np.out" | tr '\n' ' ') vs $(tokens "$dir/one.out" | tr '\n' ' ')"
done
"$mpiexec" -np 3 --oversubscribe "$kelvin" "${generate[@]}" > "$dir/np3.out" 2> "$dir/np3.err" &&
  fail "3 ranks (the tiny model has 4 heads) were not refused"
grep -q "kelvin: generate on 3 processes splits the model over all of them (tensor parallelism), and invalid parallel layout" "$dir/np3.err" ||
  fail "3 ranks: no message naming the split: $(grep 'kelvin:' "$dir/np3.err" | head -n 1)"

# generate --chat - on 2 ranks: rank 0 reads the piped conversation and sends each line to the
# other rank, both generate every turn, rank 0 alone prints, and the turns are one process's.
# The model: the tiny preset with the Llama-3-style test tokenizer's 4104 ids (and its template).
vocab=(--set model.architecture.vocab_size=4104 --set checkpoint.dir=\""$dir/chat_ckpt"\")
"$kelvin" train "$job" "${vocab[@]}" --set training.steps=2 --set lr_schedule.warmup_steps=1 \
  --set training.eval_interval=0 --set training.export_hf_dir=\"\" \
  --set launch.run_dir=\""$dir/chat_run"\" > "$dir/chat_train.log" 2>&1 ||
  { tail -n 5 "$dir/chat_train.log"; fail "training the chat model"; }
chat=(generate "$job" "${vocab[@]}" --tokenizer "$source_dir/tests/fixtures/tokenizer/llama3_style"
      --chat - --json --max-new-tokens 6)
turns=$'Hello\nRepeat: 4 0 5\n'
printf '%s' "$turns" | "$kelvin" "${chat[@]}" > "$dir/chat1.out" 2> "$dir/chat1.err" ||
  fail "--chat -, one process: $(tail -n 1 "$dir/chat1.err")"
[ "$(wc -l < "$dir/chat1.out")" -eq 2 ] || fail "--chat -, one process: $(wc -l < "$dir/chat1.out") lines for 2 turns"
printf '%s' "$turns" | "$mpiexec" -np 2 --oversubscribe "$kelvin" "${chat[@]}" > "$dir/chat2.out" 2> "$dir/chat2.err" ||
  fail "--chat - on 2 ranks: $(grep 'kelvin:' "$dir/chat2.err" | head -n 1)"
cmp -s "$dir/chat1.out" "$dir/chat2.out" ||
  fail "--chat - on 2 ranks differs from one process: $(diff "$dir/chat1.out" "$dir/chat2.out" | head -n 4)"

# eval --data: the loss of a corpus of 600 token ids in windows of 64.
for i in $(seq 0 599); do  # little-endian int32 ids below 256
  printf "\\x$(printf %02x $(( (i * 7919 + 13) % 256 )))\\x00\\x00\\x00"
done > "$dir/corpus.int32"
score=(eval "$job" --set checkpoint.dir=\""$dir/ckpt"\" --data "$dir/corpus.int32" --seq-length 64)
loss() { sed -n 's/.*score of .* | loss \([0-9.]*\) | .*/\1/p' "$1"; }
"$kelvin" "${score[@]}" > "$dir/score1.log" 2>&1 || fail "eval --data, one process: $(tail -n 1 "$dir/score1.log")"
one=$(loss "$dir/score1.log")
[ -n "$one" ] || fail "eval --data, one process: no score line"
for np in 2 4; do
  "$mpiexec" -np "$np" --oversubscribe "$kelvin" "${score[@]}" > "$dir/score$np.log" 2>&1 ||
    fail "eval --data on $np ranks: $(grep 'kelvin:' "$dir/score$np.log" | head -n 1)"
  [ "$(grep -c 'score of' "$dir/score$np.log")" -eq 1 ] || fail "eval --data on $np ranks: not one score line"
  awk -v a="$(loss "$dir/score$np.log")" -v b="$one" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-6 * b) }' ||
    fail "eval --data on $np ranks: loss $(loss "$dir/score$np.log"), one process $one"
done
# The same corpus scored from a Hugging Face directory (a job of the model alone) on 2 ranks.
"$kelvin" convert "$job" --set checkpoint.dir=\""$dir/ckpt"\" --out "$dir/hf" > "$dir/convert.log" 2>&1 ||
  fail "convert: $(tail -n 1 "$dir/convert.log")"
"$mpiexec" -np 2 --oversubscribe "$kelvin" eval "$dir/hf" --data "$dir/corpus.int32" --seq-length 64 \
  > "$dir/score_hf.log" 2>&1 || fail "eval of a model directory on 2 ranks: $(grep 'kelvin:' "$dir/score_hf.log" | head -n 1)"
awk -v a="$(loss "$dir/score_hf.log")" -v b="$one" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-6 * b) }' ||
  fail "eval of a model directory on 2 ranks: loss $(loss "$dir/score_hf.log"), one process $one"

# eval --needle of an SSA model that retrieves at its trained length (160) and not at 320, with its
# temperature histograms: on 2 ranks the cells and every histogram's counts and sigma(alpha) per
# head equal one process's (each rank's heads merged), the means within f32 rounding.
"$kelvin" train "$job" --set training.steps=120 --set training.eval_interval=0 \
  --set training.export_hf_dir=\"\" --set model.ssa.enabled=true \
  --set checkpoint.dir=\""$dir/ssa_ckpt"\" --set launch.run_dir=\""$dir/ssa_run"\" > "$dir/ssa_train.log" 2>&1 ||
  { tail -n 5 "$dir/ssa_train.log"; fail "training the SSA model"; }
needle=(eval "$job" --set model.ssa.enabled=true --set checkpoint.dir=\""$dir/ssa_ckpt"\" --needle
        --lengths 160,320 --depths 0,0.5,1 --samples 4 --temperatures)
"$kelvin" "${needle[@]}" --json "$dir/needle1.json" > "$dir/needle1.log" 2>&1 ||
  fail "eval --needle, one process: $(tail -n 1 "$dir/needle1.log")"
"$mpiexec" -np 2 --oversubscribe "$kelvin" "${needle[@]}" --json "$dir/needle2.json" > "$dir/needle2.log" 2>&1 ||
  fail "eval --needle on 2 ranks: $(grep 'kelvin:' "$dir/needle2.log" | head -n 1)"
grep -q '"retrieved": 4' "$dir/needle1.json" && grep -q '"retrieved": 0' "$dir/needle1.json" ||
  fail "the SSA model's grid does not both retrieve and miss: $(grep '"accuracy"' "$dir/needle1.json" | tr -d ' \n')"
grep -q '"sigma_alpha": \[' "$dir/needle1.json" || fail "the needle grid has no temperatures"
[ "$(grep -c '"count": 0,' "$dir/needle1.json")" -eq 0 ] || fail "a temperature histogram is empty"
exact() { grep -v '"mean' "$1" | tr -d ' \n'; }  # every line but the means
[ "$(exact "$dir/needle2.json")" = "$(exact "$dir/needle1.json")" ] ||
  fail "eval --needle on 2 ranks differs from one process: $(diff <(grep -v '"mean' "$dir/needle1.json") <(grep -v '"mean' "$dir/needle2.json") | head -n 6)"
means() { sed -n 's/.*"mean[a-z_]*": \([-0-9.e+]*\).*/\1/p' "$1"; }
paste <(means "$dir/needle1.json") <(means "$dir/needle2.json") |
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * ($1 < 0 ? -$1 : $1) + 1e-12) bad = 1; n++ }
       END { exit !(n > 0 && !bad) }' ||
  fail "eval --needle on 2 ranks: the means differ beyond f32 rounding"

finish
