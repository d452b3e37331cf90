#!/usr/bin/env bash
# Run HERE (a Debian machine set up by scripts/setup.sh) before a GPU session. The GPU machine has
# the CUDA toolkit, CMake and Python with PyTorch but none of the Debian packages Kelvin links, and
# building there would spend its scarce device time; so this builds the whole project here (CUDA
# on, sm_90, Release, the cuDNN attention core on: scripts/fetch_cudnn_frontend.sh first) into a
# build directory (argument 1, relative to the root; default
# build/gpu-prebuilt; an existing CUDA build is reused and brought up to date) and packs
# build/device-kit/kit.tar.xz with:
#   <build directory>/...    the test programs, the GPU benchmarks, `kelvin` and CTest's files, at
#                            their paths under the repository root (run.sh recreates this
#                            machine's root path there, so CTest and the compiled-in fixture paths
#                            resolve);
#   lib/                     the shared libraries they and OpenMPI need that are not glibc's or
#                            CUDA's (abseil, protobuf, OpenBLAS and its Fortran runtime, OpenMPI,
#                            PMIx, hwloc, libevent, ...);
#   openmpi/                 mpirun and OpenMPI's and PMIx's plugins and help files, found there
#                            through OPAL_* / PMIX_* variables (run.sh sets them);
#   root.txt, build-dir.txt  this repository's root path and the build directory under it.
# The CUDA libraries come from the GPU machine's toolkit and NCCL from PyTorch's nvidia-nccl wheel;
# cuDNN (~500 MB, past what a device call carries) is opened at run time from the toolkit there or
# PyTorch's nvidia-cudnn wheel (run.sh finds it), so the kit holds none.
# Then: device run with carry ["build/device-kit"] and command `bash bench/gpu/run.sh`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
kit="$root/build/device-kit"
stage="$kit/stage"
build_dir="${1:-build/gpu-prebuilt}"
build="$root/$build_dir"
arch=x86_64-linux-gnu

"$root/scripts/fetch_cudnn_frontend.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKELVIN_CUDA=ON -DKELVIN_CUDNN=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 > /dev/null
cmake --build "$build" -j "$(nproc)"

rm -rf "$kit"
mkdir -p "$stage/lib" "$stage/openmpi/bin"
echo "$root" > "$stage/root.txt"
echo "$build_dir" > "$stage/build-dir.txt"

# The build tree's programs and CTest files, at their paths relative to the root.
programs=$(find "$build" -type f -perm -u+x ! -name '*.so' ! -path '*/CMakeFiles/*' \
             ! -name '*.sh' | sed "s|^$root/||")
ctest_files=$(find "$build" -name CTestTestfile.cmake | sed "s|^$root/||")
tar -C "$root" -cf - $programs $ctest_files | tar -C "$stage" -xf -
strip --strip-debug $(find "$stage/$build_dir" -type f -perm -u+x)

# OpenMPI's launcher, its plugins and help files, and PMIx's plugins.
cp -L /usr/bin/orterun "$stage/openmpi/bin/mpirun"
cp -L /usr/bin/orted "$stage/openmpi/bin/orted"
cp -rL /usr/lib/$arch/openmpi/lib/openmpi3 "$stage/openmpi/plugins"
cp -rL /usr/lib/$arch/pmix2/lib/pmix "$stage/openmpi/pmix-plugins"
cp -rL /usr/share/openmpi "$stage/openmpi/help"
cp -rL /usr/share/pmix "$stage/openmpi/pmix-help" 2>/dev/null || true

# Every shared library those need, except glibc's, the dynamic loader's and CUDA's.
needed=$(find "$stage" -type f \( -perm -u+x -o -name '*.so' \) -exec ldd {} \; 2>/dev/null |
           awk '$3 ~ /^\// {print $3}' | sort -u |
           grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux-x86-64)\.so|/cuda' || true)
for lib in $needed /usr/lib/$arch/openmpi/lib/*.so /usr/lib/$arch/pmix2/lib/libpmix.so.2; do
  cp -L "$lib" "$stage/lib/"
done
tar -C "$stage" -cJf "$kit/kit.tar.xz" .
rm -rf "$stage"
du -sh "$kit/kit.tar.xz"
