#!/usr/bin/env bash
# Builds turnstiled (installing what building and running it needs first, and only that; needs
# root on a fresh machine) and starts it in the foreground on 127.0.0.1:6388. Extra arguments go
# to turnstiled:
#   scripts/run.sh --http-port 6389 --threads 4 --auth-token-file /etc/turnstile/token
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh run

build_dir=${TURNSTILE_BUILD_DIR:-build}
# Only the daemon: the tests and benchmarks need packages this script does not install.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTURNSTILE_BUILD_TESTS=OFF -DTURNSTILE_BUILD_BENCH=OFF -DTURNSTILE_WERROR=OFF >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target turnstiled
exec "$build_dir/net/turnstiled" "$@"
