#!/usr/bin/env bash
# bench/gpu-carry.sh: makes a build folder runnable on a bare GPU machine that
# has the NVIDIA driver, libcudart.so.13 and libcublas.so.13 but none of the
# build machine's Debian libraries.
#
#   bench/gpu-carry.sh BUILD            # copies the libraries into BUILD/carry-lib
#   bench/gpu-carry.sh BUILD DEST       # also DEST/build.tar.xz: the test binaries, bench/gpu_bench,
#                                       # the tools (encore-plan, -prof, -launch), examples/train_gpt, train_cnn and carry-lib, stripped
#                                       # and packed (for the device tool's 64 MiB carry limit: name DEST,
#                                       # a git-ignored folder such as build-gpu, in `carry`); then, there:
#                                       # bench/gpu-check DEST/build.tar.xz
#
# Which libraries: every library `ldd` resolves for those binaries except the
# C/C++ runtime (libc, libm, libstdc++, libgcc_s, ...), which any Linux with
# glibc >= 2.34 and GLIBCXX_3.4.30 has, and the NVIDIA driver and CUDA
# libraries (libcuda, libcudart, libcublas*, libnccl: 218 MB; libcudnn, whose
# 128 KB loader dlopens its engine libraries, hundreds of MB, from its own
# folder), which must come from the GPU machine itself (bench/gpu-check finds
# them there: the nvidia-* wheels beside PyTorch hold cuDNN 9 and NCCL). That leaves e.g. libopenblas, libgfortran, libgomp,
# libquadmath, libbenchmark and libcupti. bench/gpu-check puts carry-lib first
# on LD_LIBRARY_PATH. Prints what it copied and the sizes.
set -euo pipefail

[ "$#" -ge 1 ] && [ "$#" -le 2 ] || { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 64; }
BUILD="$(cd "$1" && pwd)"
DEST="${2:-}"

# Binaries gpu-check runs.
mapfile -t BINS < <(find "$BUILD/tests" -type f -name '*_test' -perm -u+x | sort)
for b in bench/gpu_bench tools/encore-plan tools/encore-prof tools/encore-launch examples/train_gpt examples/train_cnn; do
  [ -x "$BUILD/$b" ] && BINS+=("$BUILD/$b")
done
[ "${#BINS[@]}" -gt 0 ] || { echo "gpu-carry: no binaries under $BUILD" >&2; exit 1; }

# Libraries the GPU machine provides or that every Linux has.
keep_out='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libutil|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn|libnccl|libnvidia)[.-]'

mkdir -p "$BUILD/carry-lib"
mapfile -t LIBS < <(for b in "${BINS[@]}"; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1 " " $3}' |
                    sort -u | while read -r name path; do
                      [[ "$name" =~ $keep_out ]] || echo "$path"
                    done)
for lib in "${LIBS[@]}"; do
  cp -L "$lib" "$BUILD/carry-lib/$(basename "$lib")"
done
echo "carry-lib: ${LIBS[*]##*/}"
du -sh "$BUILD/carry-lib"

[ -n "$DEST" ] || exit 0
# The slim copy: stripped binaries, carry-lib and meson-info under build/, packed
# as DEST/build.tar.xz (unpacked ~580 MB, mostly each binary's copy of the
# CUDA kernels; packed see below).
mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
for b in "${BINS[@]}"; do
  rel="${b#"$BUILD"/}"
  mkdir -p "$STAGE/build/$(dirname "$rel")"
  strip --strip-unneeded -o "$STAGE/build/$rel" "$b"
done
cp -r "$BUILD/carry-lib" "$STAGE/build/carry-lib"
[ -d "$BUILD/meson-info" ] && cp -r "$BUILD/meson-info" "$STAGE/build/meson-info"
# The planner tests read the shared MiniMalloc problems (60 KB), which live outside the checkout.
SHARED="$(cd "$(dirname "$0")/../.." && pwd)/shared"
[ -d "$SHARED/data" ] && mkdir -p "$STAGE/build/shared" && cp -r "$SHARED/data" "$STAGE/build/shared/data"
# examples/train_cnn's digits (./run fetches them into data/, which git ignores).
DIGITS="$(cd "$(dirname "$0")/.." && pwd)/data/digits.csv.gz"
[ -f "$DIGITS" ] && mkdir -p "$STAGE/build/data" && cp "$DIGITS" "$STAGE/build/data/"
# One xz stream with a 256 MiB dictionary: the test binaries each hold a copy
# of the same CUDA kernels (about 15 MB stripped), which a dictionary that
# spans several binaries stores once (the default 8 MiB, or the blocks of a
# threaded xz, cannot see across binaries: 87 MB packed, over the device's
# 64 MiB carry). Unpacking needs 256 MiB of memory.
tar -C "$STAGE" -cf - build | xz -T1 --lzma2=preset=6,dict=256MiB >"$DEST/build.tar.xz"
du -sh "$STAGE/build" "$DEST/build.tar.xz"
echo "run there: bench/gpu-check ${2%/}/build.tar.xz"
