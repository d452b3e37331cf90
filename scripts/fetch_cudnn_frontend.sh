#!/usr/bin/env bash
# Fetches the header-only cuDNN frontend (the C++ graph API the cuDNN attention core is built on,
# ssa/cudnn_attention.cc) at a pinned version: pip downloads NVIDIA's `nvidia-cudnn-frontend`
# wheel (one fixed platform tag and its sha256, whatever Python runs this) and unpacks its
# include/ into third_party/cudnn_frontend/ (git-ignored; never committed). Idempotent.
# Usage: scripts/fetch_cudnn_frontend.sh   -> exit 0 with the headers in place, else 1 and why.
set -euo pipefail

version=1.32.0
wheel_sha256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/third_party/cudnn_frontend"
stamp="$dest/VERSION"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$version" && -f "$dest/include/cudnn_frontend.h" ]]; then
  exit 0
fi
python="$(command -v python3 || true)"
if [[ -z "$python" ]] || ! "$python" -m pip --version > /dev/null 2>&1; then
  echo "fetch_cudnn_frontend.sh: needs python3 with pip for nvidia-cudnn-frontend==$version" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "nvidia-cudnn-frontend==$version --hash=sha256:$wheel_sha256" > "$work/requirements.txt"
# Every wheel of a version holds the same headers; this tag names one file, which the hash pins.
if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
     --python-version 3.11 --implementation cp --platform manylinux_2_28_x86_64 \
     -r "$work/requirements.txt" -d "$work" > "$work/pip.log" 2>&1; then
  echo "fetch_cudnn_frontend.sh: pip download of nvidia-cudnn-frontend==$version failed:" >&2
  tail -n 5 "$work/pip.log" >&2
  exit 1
fi
"$python" - "$work" <<'PY'
import glob, sys, zipfile
work = sys.argv[1]
(wheel,) = glob.glob(f"{work}/*.whl")
with zipfile.ZipFile(wheel) as z:
    z.extractall(f"{work}/unpacked", [n for n in z.namelist() if n.startswith("include/")])
PY
rm -rf "$dest"
mkdir -p "$dest"
mv "$work/unpacked/include" "$dest/include"
echo "$version" > "$stamp"
echo "fetch_cudnn_frontend.sh: cuDNN frontend $version headers in $dest/include"
