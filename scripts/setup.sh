#!/usr/bin/env bash
# Installs the Debian 12 packages sqlgroup needs (only those missing) and
# builds the project into ./build. Idempotent and quiet when all is there.
# Usage: scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake make pkg-config git procps
  libpqxx-dev libpq-dev libabsl-dev prometheus-cpp-dev libspdlog-dev
  libfmt-dev libcurl4-openssl-dev libssl-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev
  postgresql-15 postgresql-client-15 pgbouncer prometheus python3 python3-yaml
  curl ca-certificates openssl  # openssl: tls_test makes its certificates
  # .ci/run's checks: lock annotations, sanitizer runtimes, formatting.
  clang libclang-rt-14-dev clang-format
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
    missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  # sqlgroup starts its own private clusters; the package's default
  # cluster and the prometheus service would only be stray processes.
  $sudo mkdir -p /etc/postgresql-common
  if ! grep -qs '^create_main_cluster' /etc/postgresql-common/createcluster.conf; then
    echo 'create_main_cluster = false' | $sudo tee -a /etc/postgresql-common/createcluster.conf >/dev/null
  fi
  printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
  $sudo chmod +x /usr/sbin/policy-rc.d
  trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ "${1:-}" = "--no-build" ] && exit 0

build_type="${SQLGROUP_BUILD_TYPE:-RelWithDebInfo}"
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE="$build_type" >/dev/null
fi
# Quiet on success; the whole log on failure.
if ! cmake --build build -j"$(nproc)" >build/build.log 2>&1; then
  cat build/build.log >&2
  exit 1
fi
grep -i 'warning' build/build.log >&2 || true
