#!/usr/bin/env bash
# Installs the built library into a scratch prefix, then builds and runs a consumer twice:
# with pkg-config and with CMake's find_package(ddl).
#   check_install.sh BUILD_DIR
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" > /dev/null
libdir=$(dirname "$(find "$prefix" -name libddl.so.0 | head -1)")
export PKG_CONFIG_PATH="$libdir/pkgconfig"
export LD_LIBRARY_PATH="$libdir"

cc -std=c99 -Wall -Werror "$here/consumer.c" -o "$prefix/consumer_pc" $(pkg-config --cflags --libs ddl)
"$prefix/consumer_pc"

cmake -S "$here" -B "$prefix/cmake-consumer" -DCMAKE_PREFIX_PATH="$prefix" > /dev/null
cmake --build "$prefix/cmake-consumer" > /dev/null
"$prefix/cmake-consumer/consumer"
echo "install check: pkg-config and find_package(ddl) consumers ran"
