#!/usr/bin/env bash
# Sets up this machine for Kelvin and builds it: installs the Debian packages it needs (only when
# missing, so it is idempotent), finds the CUDA toolkit (CUDA_HOME or /usr/local/cuda; absent means
# a CPU-only build), fetches the pinned cuDNN frontend headers for a CUDA build
# (scripts/fetch_cudnn_frontend.sh; under --cudnn AUTO a failed download builds without the cuDNN
# attention core and says so), configures and builds.
# Usage: scripts/setup.sh [--build-dir DIR] [--cuda AUTO|ON|OFF] [--cudnn AUTO|ON|OFF]
#                         [--sanitize | --sanitize-inputs]
#                         [--werror] [--build-type Release|Debug|RelWithDebInfo] [--target T]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$root/build/release"
cuda_mode="AUTO"
cudnn_mode="AUTO"
sanitize="OFF"
sanitize_inputs="OFF"
werror="OFF"
build_type="Release"
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --cuda) cuda_mode="$2"; shift 2 ;;
    --cudnn) cudnn_mode="$2"; shift 2 ;;
    --sanitize) sanitize="ON"; shift ;;
    --sanitize-inputs) sanitize_inputs="ON"; shift ;;
    --werror) werror="ON"; shift ;;
    --build-type) build_type="$2"; shift 2 ;;
    --target) targets+=(--target "$2"); shift 2 ;;
    *) echo "setup.sh: unknown argument '$1' (see the usage line at the top of $0)" >&2; exit 2 ;;
  esac
done

packages=(build-essential ccache cmake git libopenmpi-dev openmpi-bin libprotobuf-dev protobuf-compiler
          libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
          libopenblas-openmp-dev
          libpcre2-dev nlohmann-json3-dev libcli11-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup.sh: installing ${missing[*]}"
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup.sh: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    sudo_cmd=(sudo)
  fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi

cmake_args=(-DCMAKE_BUILD_TYPE="$build_type" -DKELVIN_CUDA="$cuda_mode"
            -DKELVIN_CUDNN="$cudnn_mode"
            -DKELVIN_SANITIZE="$sanitize" -DKELVIN_SANITIZE_INPUTS="$sanitize_inputs"
            -DKELVIN_WERROR="$werror")
if [[ "$cuda_mode" != "OFF" ]]; then
  cuda_home="${CUDA_HOME:-/usr/local/cuda}"
  if [[ -x "$cuda_home/bin/nvcc" ]]; then
    cmake_args+=(-DCMAKE_CUDA_COMPILER="$cuda_home/bin/nvcc" -DCUDAToolkit_ROOT="$cuda_home")
    echo "setup.sh: CUDA toolkit at $cuda_home ($("$cuda_home/bin/nvcc" --version | tail -n 2 | head -n 1))"
    if [[ "$cudnn_mode" != "OFF" ]] && ! "$root/scripts/fetch_cudnn_frontend.sh"; then
      if [[ "$cudnn_mode" == "ON" ]]; then
        echo "setup.sh: --cudnn ON but the cuDNN frontend could not be fetched (above)" >&2
        exit 1
      fi
      echo "setup.sh: no cuDNN frontend: building without the cuDNN attention core (--cudnn AUTO)"
    fi
  elif [[ "$cuda_mode" == "ON" ]]; then
    echo "setup.sh: --cuda ON but no nvcc at $cuda_home/bin/nvcc; set CUDA_HOME" >&2
    exit 1
  else
    echo "setup.sh: no CUDA toolkit at $cuda_home; building CPU-only"
  fi
fi

jobs="$(nproc)"
cmake -S "$root" -B "$build_dir" "${cmake_args[@]}"
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"
echo "setup.sh: built $build_dir"
