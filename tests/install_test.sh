#!/usr/bin/env bash
# Installs sqlgroup into a temporary prefix and builds and runs
# examples/embed against it through find_package(sqlgroup).
set -euo pipefail
build_dir=$1
source_dir=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build_dir" --prefix "$prefix" >/dev/null
cmake -S "$source_dir/examples/embed" -B "$prefix/example-build" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$prefix/example-build" -j2 >/dev/null
"$prefix/example-build/sqlgroup_example"
