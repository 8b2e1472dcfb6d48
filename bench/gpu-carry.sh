#!/usr/bin/env bash
# bench/gpu-carry.sh: makes a build folder runnable on a bare GPU machine that
# has the NVIDIA driver, libcudart.so.13 and libcublas.so.13 but none of the
# build machine's Debian libraries.
#
#   bench/gpu-carry.sh BUILD            # copies the libraries into BUILD/carry-lib
#   bench/gpu-carry.sh BUILD DEST       # also a slim copy DEST: the test binaries, bench/gpu_bench,
#                                       # tools/encore-plan and carry-lib, stripped (for the device
#                                       # tool's 64 MiB carry limit); then, there: bench/gpu-check DEST
#
# Which libraries: every library `ldd` resolves for those binaries except the
# C/C++ runtime (libc, libm, libstdc++, libgcc_s, ...), which any Linux with
# glibc >= 2.34 and GLIBCXX_3.4.30 has, and the NVIDIA driver and CUDA runtime
# libraries (libcuda, libcudart, libcublas*), which must come from the GPU
# machine itself. That leaves e.g. libopenblas, libgfortran, libgomp,
# libquadmath, libbenchmark and libcupti. bench/gpu-check puts carry-lib first
# on LD_LIBRARY_PATH. Prints what it copied and the sizes.
set -euo pipefail

[ "$#" -ge 1 ] && [ "$#" -le 2 ] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 64; }
BUILD="$(cd "$1" && pwd)"
DEST="${2:-}"

# Binaries gpu-check runs.
mapfile -t BINS < <(find "$BUILD/tests" -type f -name '*_test' -perm -u+x | sort)
for b in bench/gpu_bench tools/encore-plan; do
  [ -x "$BUILD/$b" ] && BINS+=("$BUILD/$b")
done
[ "${#BINS[@]}" -gt 0 ] || { echo "gpu-carry: no binaries under $BUILD" >&2; exit 1; }

# Libraries the GPU machine provides or that every Linux has.
keep_out='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnvidia)[.-]'

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
rm -rf "$DEST"
mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"
for b in "${BINS[@]}"; do
  rel="${b#"$BUILD"/}"
  mkdir -p "$DEST/$(dirname "$rel")"
  strip --strip-unneeded -o "$DEST/$rel" "$b"
done
cp -r "$BUILD/carry-lib" "$DEST/carry-lib"
[ -d "$BUILD/meson-info" ] && cp -r "$BUILD/meson-info" "$DEST/meson-info"
du -sh "$DEST"
echo "run there: bench/gpu-check ${2}"
