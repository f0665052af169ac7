// consumer --help | consumer HOST:PORT: connects to a turnstile server with the installed client
// library, pings it, takes and releases a lock, and prints the fence it got.
#include <cstdio>
#include <cstring>

#include "client/connection.h"

int main(int argc, char** argv) {
  using namespace turnstile::client;
  if (argc != 2 || std::strcmp(argv[1], "--help") == 0) {
    std::printf("usage: consumer HOST:PORT (default port %u)\n", unsigned{kDefaultPort});
    return argc == 2 ? 0 : 2;
  }
  Result<Endpoint> endpoint = parse_endpoint(argv[1]);
  if (!endpoint) {
    std::fprintf(stderr, "bad endpoint: %s\n", endpoint.error().to_string().c_str());
    return 2;
  }
  Result<Connection> connection = Connection::connect(*endpoint);
  if (!connection) {
    std::fprintf(stderr, "connect: %s\n", connection.error().to_string().c_str());
    return 1;
  }
  if (Result<void> pong = connection->ping(); !pong) {
    std::fprintf(stderr, "ping: %s\n", pong.error().to_string().c_str());
    return 1;
  }
  Result<Grant> grant = connection->lock("install-test", Seconds{5});
  if (!grant) {
    std::fprintf(stderr, "lock: %s\n", grant.error().to_string().c_str());
    return 1;
  }
  if (Result<void> released = connection->release("install-test", grant->token); !released) {
    std::fprintf(stderr, "release: %s\n", released.error().to_string().c_str());
    return 1;
  }
  std::printf("locked and released install-test, fence %llu\n",
              static_cast<unsigned long long>(grant->fence()));
  return 0;
}
