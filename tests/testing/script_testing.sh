# Sourced by the shell tests: a scratch directory $dir, removed at exit; fail MESSAGE prints
# "FAIL: MESSAGE" and marks the test failed; finish prints PASS when nothing failed and exits with
# the test's status.
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }
finish() {
  [[ $failed -eq 0 ]] && echo "PASS"
  exit "$failed"
}
