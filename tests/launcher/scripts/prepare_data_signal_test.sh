#!/usr/bin/env bash
# kelvin prepare-data stopped by SIGINT, SIGTERM or SIGUSR1 (a batch job's warning) while it writes
# leaves nothing of its output (the signal handler removes its temporaries) and an earlier dataset
# under the prefix whole:
#   prepare_data_signal_test.sh KELVIN
set -u
kelvin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# An earlier dataset under the prefix, and a large input that takes a few seconds.
echo '{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}' > "$dir/small.jsonl"
"$kelvin" prepare-data "$dir/small.jsonl" --out "$dir/out/data" > /dev/null || fail "small run"
before=$(cd "$dir/out" && ls && cat data.bin data.idx | md5sum)
line='{"input_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], "labels": [-100, -100, -100, -100, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]}'
yes "$line" | head -n 1500000 > "$dir/big.jsonl"

for signal in INT TERM USR1; do
  "$kelvin" prepare-data "$dir/big.jsonl" --out "$dir/out/data" > "$dir/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 400); do  # until it writes its temporaries
    compgen -G "$dir/out/data.bin.tmp.*" > /dev/null && break
    sleep 0.01
  done
  compgen -G "$dir/out/data.bin.tmp.*" > /dev/null || fail "no temporary appeared before SIG$signal"
  kill -s "$signal" "$pid"
  wait "$pid"
  status=$?
  echo "SIG$signal: exit status $status"
  [ "$status" -gt 128 ] || fail "SIG$signal: exit status $status, expected death by the signal"
  after=$(cd "$dir/out" && ls && cat data.bin data.idx | md5sum)
  if [ "$after" != "$before" ]; then
    fail "SIG$signal left files behind or changed the earlier dataset:"
    ls -la "$dir/out"
  fi
done
[ "$failed" -eq 0 ] && echo "PASS"
exit "$failed"
