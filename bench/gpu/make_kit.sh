#!/usr/bin/env bash
# Run HERE (a Debian machine set up by scripts/setup.sh), before a GPU session: copies the Debian
# headers and libraries that the GPU machine lacks (abseil, GoogleTest, Google Benchmark, OpenBLAS
# and its Fortran runtime, nlohmann-json) into build/device-kit/usr, keeping Debian's layout so their CMake package
# files stay valid. Pass `build/device-kit` in the device tool's `carry`; bench/gpu/run.sh uses it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
kit="$root/build/device-kit"
arch=x86_64-linux-gnu
rm -rf "$kit"
mkdir -p "$kit"

# copy PATH...: each absolute path lands at $kit/PATH (symlinks kept as they are).
copy() { tar -C / -cf - "${@#/}" | tar -C "$kit" -xf -; }
copy /usr/include/absl /usr/include/nlohmann /usr/share/cmake/nlohmann_json /usr/include/gtest /usr/include/gmock /usr/include/benchmark \
     /usr/include/$arch/openblas-openmp \
     /usr/lib/$arch/cmake/absl /usr/lib/$arch/cmake/GTest /usr/lib/$arch/cmake/benchmark
copy /usr/lib/$arch/libabsl_*.so* /usr/lib/$arch/libgtest*.a /usr/lib/$arch/libgmock*.a \
     /usr/lib/$arch/libbenchmark*
# OpenBLAS (OpenMP build), the real file under its plain names.
openblas="$(readlink -f /usr/lib/$arch/openblas-openmp/libopenblas.so.0)"
install -m 644 "$openblas" "$kit/usr/lib/$arch/libopenblas.so.0"
ln -sf libopenblas.so.0 "$kit/usr/lib/$arch/libopenblas.so"
for lib in libgfortran.so.5 libquadmath.so.0; do
  install -m 644 "$(readlink -f /usr/lib/$arch/$lib)" "$kit/usr/lib/$arch/$lib"
done
du -sh "$kit"
