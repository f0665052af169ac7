#!/usr/bin/env bash
# `cmake --install` into a temporary prefix, then a C++ project that finds the client library
# with find_package(turnstile) builds against it, links, and locks on the installed turnstiled.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d /tmp/turnstile-install-test.XXXXXX)
daemon_pid=
cleanup() {
  if [ -n "$daemon_pid" ]; then kill "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || {
  cat "$work/install.log"; fail "cmake --install"; }

# TURNSTILE_PROGRAMS: what this build installs (tests/packaging/CMakeLists.txt)
programs=${TURNSTILE_PROGRAMS:-turnstiled turnstile turnstile-bench turnstile-sim}
for program in $programs; do
  [ -x "$prefix/bin/$program" ] || fail "bin/$program not installed"
  help=$("$prefix/bin/$program" --help) || fail "bin/$program --help exited $?"
  grep -qi usage <<<"$help" || fail "bin/$program --help printed no usage: $help"
  # Its manual page, made from that --help (packaging/man.cmake).
  gzip -dc "$prefix/share/man/man1/$program.1.gz" | grep -q "^\.SH DESCRIPTION" ||
    fail "share/man/man1/$program.1.gz is missing or no manual page"
done
# Every variable the environment file sets or shows (packaging/turnstiled.default) is one the
# daemon reads: turnstiled ignores an unknown TURNSTILE_ variable, so a typo would go unseen.
daemon_help=$("$prefix/bin/turnstiled" --help)
names=$(grep -oE '^#?TURNSTILE_[A-Z0-9_]+=' "$source/packaging/turnstiled.default" | tr -d '#=')
[ -n "$names" ] || fail "no TURNSTILE_ variable in packaging/turnstiled.default"
for name in $names; do
  grep -qE "env $name[,;]" <<<"$daemon_help" ||
    fail "packaging/turnstiled.default names $name, which turnstiled --help does not list"
done
for file in share/doc/turnstile/README.md share/doc/turnstile/install.md \
  share/doc/turnstile/configuration.md lib/libturnstile_client.a lib/libturnstile_protocol.a \
  include/turnstile/client/connection.h include/turnstile/core/wire.h \
  lib/cmake/turnstile/turnstileConfig.cmake lib/cmake/turnstile/turnstileConfigVersion.cmake; do
  [ -f "$prefix/$file" ] || fail "$file not installed"
done
# The unit and the environment file (absolute paths) are the Debian package's only.
if grep -E 'turnstiled\.service|/etc/default' "$work/install.log"; then
  fail "a plain cmake --install installed the service component"
fi
[ ! -e "$prefix/include/turnstile/client/cli.h" ] || fail "the CLI's header was installed"

# The consumer sees nothing of the source tree: only the prefix.
cmake -S "$source/tests/packaging/consumer" -B "$work/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$work/configure.log" 2>&1 || {
  cat "$work/configure.log"; fail "the consumer's configure (find_package(turnstile))"; }
cmake --build "$work/consumer" >"$work/build.log" 2>&1 || {
  cat "$work/build.log"; fail "the consumer's build"; }
"$work/consumer/consumer" --help | grep -q '^usage: consumer' || fail "consumer --help"

# A version the package config must refuse.
cat >"$work/old.cmake" <<'CMAKE'
find_package(turnstile 99 QUIET)
if(turnstile_FOUND)
  message(FATAL_ERROR "turnstile 99 found")
endif()
CMAKE
(cd "$work" && cmake -DCMAKE_PREFIX_PATH="$prefix" -P old.cmake) || fail "version check"

# The installed daemon, the installed library: one lock.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$prefix/bin/turnstiled" --host 127.0.0.1 --port "$port" --threads 1 --huge-pages=false \
  >"$work/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 100); do
  if "$work/consumer/consumer" "127.0.0.1:$port" >"$work/consumer.out" 2>&1; then break; fi
  sleep 0.1
done
grep -q '^locked and released install-test, fence ' "$work/consumer.out" || {
  cat "$work/consumer.out" "$work/daemon.log"; fail "the consumer's lock"; }
kill -TERM "$daemon_pid"
wait "$daemon_pid" || fail "turnstiled exited $? on SIGTERM"
daemon_pid=
echo "install_test: ok ($(cat "$work/consumer.out"))"
