#!/usr/bin/env bash
# Packs a ddl build for a GPU machine that has CUDA and PyTorch but none of ddl's Debian
# packages (UCX, hwloc, Criterion): the binaries run_gpu_checks.sh calls, in the build's own
# layout, and every shared library they need that such a machine may lack.
#
#   tests/gpu/pack_for_device.sh BUILD_DIR DEST
#
# Then, on the GPU machine: tests/gpu/on_device.sh DEST LOG_DIR. DEST/build is a build folder
# as run_gpu_checks.sh expects; DEST/lib holds the libraries and DEST/lib/ucx UCX's modules
# (UCX loads its transports with dlopen from a folder fixed at its build: UCX_MODULE_DIR
# points it here). The C library, the C++ runtime and the CUDA driver stay the machine's own.
set -euo pipefail
build=$(cd "${1:?usage: pack_for_device.sh BUILD_DIR DEST}" && pwd)
dest=${2:?usage: pack_for_device.sh BUILD_DIR DEST}
rm -rf "$dest"
mkdir -p "$dest/build/bin" "$dest/build/tests/device" "$dest/build/bench/kernels" "$dest/lib/ucx"

binaries=(bin/ddlrun bin/ddl_perf bin/ddl_topo tests/device/test_device_kernels_gpu
          tests/device/test_stream_wait_gpu bench/kernels/device_reduce_bench)
for b in "${binaries[@]}"; do
  cp "$build/$b" "$dest/build/$b"
done
cp -P "$build"/libddl.so* "$dest/build/"

ucx_modules=$(dirname "$(ldconfig -p | awk '/libucs\.so\.0 /{print $NF; exit}')")/ucx
cp "$ucx_modules"/*.so* "$dest/lib/ucx/"

# Every library these load, except those any Linux with CUDA has (glibc's, the C++ runtime's,
# the driver's) and ddl's own.
base='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda|libddl)\.'
for f in "$dest"/build/bin/* "$dest"/build/tests/device/* "$dest"/build/bench/kernels/* \
         "$dest"/build/libddl.so.0 "$dest"/lib/ucx/*.so*; do
  ldd "$f" 2> /dev/null | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $base ]] || cp -L "$path" "$dest/lib/$name"
done
strip --strip-debug "$dest"/build/bin/* "$dest"/build/tests/device/* \
  "$dest"/build/bench/kernels/* "$dest"/build/libddl.so.0 2> /dev/null || true
du -sh "$dest" | awk '{print "pack_for_device: " $1 " in " $2}'
