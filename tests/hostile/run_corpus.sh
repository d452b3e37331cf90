#!/usr/bin/env bash
# A hostile corpus against the kelvin command: tokenizer.json, chat templates, JSON Lines samples,
# model directories (config.json, safetensors), the forward-only commands' options, job files and
# checkpoints. Each case builds its input in a directory of its own, runs kelvin there under a
# time bound, and is classified: PASS (the expected exit code and a message matching what the case
# names), or CRASH (a signal or a sanitizer report), HANG (past the bound), SILENT (bad input
# accepted), UNCLEAR (an error that does not say what the case names), EXIT (another exit code),
# LEFTOVER (a file left behind by a failed run); KNOWN and FIXED for the cases of
# known_failures.txt. One line per case, then a summary. The cases are in cases/*.sh.
# Usage: run_corpus.sh KELVIN SOURCE_DIR [CASE_REGEX]
# Exit 0 when every case passes (or fails as known_failures.txt says). KELVIN_HOSTILE_TIMEOUT sets
# the bound per case (default 30 s). Run it on an ASan + UBSan build too: a sanitizer's report is a
# CRASH.
set -uo pipefail

kelvin=$(realpath "$1")
source_dir=$(realpath "$2")
only="${3:-}"
bound="${KELVIN_HOSTILE_TIMEOUT:-30}"
fixtures="$source_dir/tests/fixtures"
scratch=$(mktemp -d)
# KELVIN_HOSTILE_KEEP=DIR: each case's output is kept there as NAME.out.
keep="${KELVIN_HOSTILE_KEEP:-}"
trap 'chmod -R u+w "$scratch" 2>/dev/null; rm -rf "$scratch"' EXIT
# Leaks are not checked by default: Open MPI's and Abseil's own allocations, never freed, are
# reported at the exit of every command that starts MPI (train, the checkpoint cases' resumes).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

declare -A class_count=()
# known_failures.txt: "NAME: the failure, and where its rule lives" for failures reported but not
# fixed yet. Such a case prints KNOWN and does not fail the run; once it passes it prints FIXED and
# fails the run, so that its line is deleted.
declare -A known=()
while IFS= read -r line; do
  [[ "$line" =~ ^([a-z0-9_]+): ]] && known[${BASH_REMATCH[1]}]=1
done < "$source_dir/tests/hostile/known_failures.txt"
total=0
failed_names=()
W=""  # the running case's directory: its inputs, its working directory, its outputs

# begin NAME: a fresh directory for the case (0: run it; 1: skipped by CASE_REGEX).
begin() {
  if [[ -n "$only" && ! "$1" =~ $only ]]; then return 1; fi
  W="$scratch/$1"
  mkdir -p "$W"
}

# expect NAME EXIT REGEX -- ARGS...: runs kelvin ARGS in $W and classifies the outcome. REGEX
# (extended, matched against stdout and stderr together) is what a clear answer says: for an error,
# the file, field or value and what to do.
expect() {
  local name=$1 want_exit=$2 regex=$3
  shift 4
  local before after out="$scratch/$name.out" class status
  before=$(cd "$W" && find . -mindepth 1 | sort)
  (cd "$W" && timeout -k 5 "$bound" "$kelvin" "$@") > "$out" 2>&1 < /dev/null
  status=$?
  # The case's directory is written $W, so that no pattern matches the case's own name.
  sed -i "s|$W|\$W|g" "$out"
  after=$(cd "$W" && find . -mindepth 1 | sort)
  if grep -aqE "AddressSanitizer|LeakSanitizer|runtime error:|UndefinedBehaviorSanitizer" "$out"; then
    class=CRASH
  elif [[ $status -eq 124 || $status -eq 137 ]]; then
    class=HANG
  elif [[ $status -gt 128 ]]; then
    class=CRASH
  elif [[ $want_exit -ne 0 && $status -eq 0 ]]; then
    class=SILENT
  elif ! grep -aqE -- "$regex" "$out"; then
    class=UNCLEAR
  elif [[ $status -ne $want_exit ]]; then
    class=EXIT
  elif [[ $want_exit -ne 0 && "$before" != "$after" ]]; then
    class=LEFTOVER
  else
    class=PASS
  fi
  if [[ -n "${known[$name]:-}" ]]; then  # reported, to be fixed where its rule lives
    if [[ $class == PASS ]]; then class=FIXED; else class=KNOWN; fi
  fi
  class_count[$class]=$(( ${class_count[$class]:-0} + 1 ))
  total=$(( total + 1 ))
  local last  # the answer's last line, without the note every error carries
  last=$(grep -aE 'kelvin|wrote' "$out" | tail -n 1 |
         sed 's/ (relative paths are resolved[^)]*)//' | cut -c1-160)
  [[ -n "$keep" ]] && mkdir -p "$keep" && cp "$out" "$keep/"
  printf '%-8s %-44s exit %3d  %s\n' "$class" "$name" "$status" "$last"
  if [[ $class != PASS && $class != KNOWN ]]; then
    failed_names+=("$name")
    if [[ $class == LEFTOVER ]]; then
      comm -13 <(echo "$before") <(echo "$after") | head -n 3 | sed 's/^/           left: /'
    fi
  fi
}

# model_copy SOURCE: a model directory to change, copied to $W/model.
model_copy() {
  cp -r "$1" "$W/model"
  chmod -R u+w "$W/model"
}

# jq_edit FILE [JQ_OPTIONS...] FILTER: rewrites a JSON file in place.
jq_edit() {
  local file=$1
  shift
  jq "$@" "$file" > "$file.new" && mv "$file.new" "$file"
}

# st_edit FILE JQ_FILTER: rewrites a safetensors header (kept at its length, padded with spaces,
# so that the data stays where the offsets say, unless the new header is longer).
st_edit() {
  local file=$1 filter=$2 n header
  n=$(od -An -tu8 -N8 "$file" | tr -d ' ')
  header=$(tail -c +9 "$file" | head -c "$n" | jq -c "$filter")
  local len=${#header}
  (( len < n )) && { header+=$(printf '%*s' $(( n - len )) ''); len=$n; }
  {
    local i
    for i in 0 1 2 3 4 5 6 7; do printf "\\x$(printf %02x $(( (len >> (8 * i)) & 255 )))"; done
    printf '%s' "$header"
    tail -c +$(( 9 + n )) "$file"
  } > "$file.new" && mv "$file.new" "$file"
}

demo_job="$source_dir/configs/passkey_tiny_cpu.textproto"

# text_model: a model directory whose tokenizer Kelvin reads (made once): the demo job's tiny model
# after one step with a vocabulary of 2112 ids, exported, with the gpt2_style tokenizer (2051 ids).
text_model="$scratch/text_model"
text_model_setup() {
  [[ -f "$text_model/tokenizer.json" || -f "$scratch/text_model.log" ]] && return 0
  (cd "$scratch" && "$kelvin" train "$demo_job" --set training.steps=1 \
     --set lr_schedule.warmup_steps=0 --set training.eval_interval=0 \
     --set model.architecture.vocab_size=2112 --set checkpoint.dir=\"\" \
     --set launch.run_dir=\""$scratch/text_model_run"\" \
     --set training.export_hf_dir=\""$text_model"\") > "$scratch/text_model.log" 2>&1 ||
    { echo "text model setup failed:"; tail -n 5 "$scratch/text_model.log"; return 0; }
  cp "$fixtures/tokenizer/gpt2_style/"{tokenizer.json,tokenizer_config.json} "$text_model/"
}

for cases in "$source_dir"/tests/hostile/cases/*.sh; do
  # shellcheck source=/dev/null
  source "$cases"
done

summary=""
for class in PASS CRASH HANG SILENT UNCLEAR EXIT LEFTOVER KNOWN FIXED; do
  summary+=" $class ${class_count[$class]:-0},"
done
echo "hostile corpus: $total cases:${summary%,}"
if [[ ${#failed_names[@]} -gt 0 ]]; then
  echo "failed: ${failed_names[*]}"
  exit 1
fi
echo "hostile corpus passed"
