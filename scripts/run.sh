#!/usr/bin/env bash
# Builds turnstiled (installing what is missing first; needs root on a fresh machine) and starts
# it in the foreground on 127.0.0.1:6388. Extra arguments go to turnstiled:
#   scripts/run.sh --threads 4 --auth-token-file /etc/turnstile/token
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh

build_dir=${TURNSTILE_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" -j "$(nproc)" --target turnstiled
exec "$build_dir/net/turnstiled" "$@"
