#!/usr/bin/env bash
# Builds turnstile and runs the whole test suite, then each libFuzzer harness for 60 s. Installs
# what is missing first (needs root on a fresh machine). About 23 minutes from a fresh clone on two
# cores, 7 of them fuzzing: TURNSTILE_FUZZ_SECONDS=0 skips the fuzzers, =N runs each for N s.
# Usage: scripts/test.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh test

build_dir=${TURNSTILE_BUILD_DIR:-build}
jobs=$(nproc)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTURNSTILE_BUILD_TESTS=ON -DTURNSTILE_BUILD_BENCH=ON -DTURNSTILE_WERROR=ON
cmake --build "$build_dir" -j "$jobs"
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" "$@"
# The libFuzzer harnesses, each for a bounded time (docs/fuzzing.md); 0 seconds skips them.
if [ "${TURNSTILE_FUZZ_SECONDS:-60}" != 0 ]; then
  ./scripts/fuzz.sh "${TURNSTILE_FUZZ_SECONDS:-60}"
fi
