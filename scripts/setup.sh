#!/usr/bin/env bash
# Installs the Debian packages turnstile needs, and nothing when they are all present.
# Usage: scripts/setup.sh [run|test|bench]
#   run    what building and running turnstiled needs, and the README's curl and nc
#          (scripts/run.sh)
#   test   that, plus what the tests, the fuzzers and the benchmarks' binaries need (scripts/test.sh)
#   bench  that, plus matplotlib for the plots of bench/tools/compare.py
# Needs root when something is missing. While another apt or dpkg run holds its lock, it waits
# (up to TURNSTILE_APT_LOCK_WAIT_S seconds, default 600) and says so, instead of failing at once.
set -euo pipefail

set_name=${1:-test}
run_packages=(
  build-essential cmake ninja-build pkg-config
  libxxhash-dev libcxxopts-dev libevent-dev libssl-dev nlohmann-json3-dev
  libraft-dev libuv1-dev  # the cluster's consensus (docs/cluster.md)
  liblz4-dev  # the raft node checks snapshot files before libraft loads them
  curl netcat-openbsd  # the README's first requests
)
test_packages=(
  clang libclang-rt-14-dev clang-format
  libgtest-dev libgmock-dev googletest
  librapidcheck-dev
  libbenchmark-dev
  openssl
  python3  # tests/chaos/signal_chaos.py, the bench smoke test's fake server
  python3-yaml  # tests/ops/check_ops.py reads the Prometheus rules file
  dpkg-dev systemd  # the package test: dpkg-shlibdeps for cpack, systemd-analyze (docs/install.md)
  lintian man-db  # the package test: lintian on the .deb, `man` on its pages (docs/install.md)
)
bench_packages=(python3-matplotlib)

case "$set_name" in
  run) packages=("${run_packages[@]}") ;;
  test) packages=("${run_packages[@]}" "${test_packages[@]}") ;;
  bench) packages=("${run_packages[@]}" "${test_packages[@]}" "${bench_packages[@]}") ;;
  *)
    echo "usage: scripts/setup.sh [run|test|bench]" >&2
    exit 2
    ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages for '$set_name' present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: must run as root to install packages (missing: ${missing[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
lock_wait_s=${TURNSTILE_APT_LOCK_WAIT_S:-600}

# apt-get with these arguments. apt-get waits for dpkg's lock by itself (DPkg::Lock::Timeout) but
# not for the package lists' lock, which `apt-get update` needs: while the failure is a lock held
# by another process, try again every 5 s, up to lock_wait_s in all.
apt_get() {
  local log waited=0 status
  log=$(mktemp)
  while true; do
    status=0
    apt-get -o DPkg::Lock::Timeout="$lock_wait_s" "$@" 2>&1 | tee "$log" || status=${PIPESTATUS[0]}
    if [ "$status" -eq 0 ]; then
      rm -f "$log"
      return 0
    fi
    if ! grep -q 'Could not get lock' "$log" || [ "$waited" -ge "$lock_wait_s" ]; then
      rm -f "$log"
      return "$status"
    fi
    echo "setup: another apt or dpkg run holds its lock; waiting for it (${waited} s of ${lock_wait_s} s)"
    sleep 5
    waited=$((waited + 5))
  done
}

apt_get update -qq
apt_get install -y -qq --no-install-recommends "${missing[@]}"
