// net/sd_notify.h: the readiness datagram reaches a socket named by a path, by an abstract name
// and through $NOTIFY_SOCKET, and nothing is sent without one.
#include "net/sd_notify.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

namespace turnstile::net {
namespace {

// A bound AF_UNIX datagram socket: the service manager's end.
class Listener {
 public:
  explicit Listener(const std::string& name) : name_(name) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, name.data(), name.size());
    if (name[0] == '@') address.sun_path[0] = '\0';
    const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    bound_ = ::bind(fd_, reinterpret_cast<const sockaddr*>(&address), length) == 0;
  }
  ~Listener() {
    ::close(fd_);
    if (name_[0] == '/') ::unlink(name_.c_str());
  }
  bool bound() const { return bound_; }
  // The next datagram, or "" when none is waiting.
  std::string receive() {
    char buffer[512];
    const ssize_t n = ::recv(fd_, buffer, sizeof buffer, MSG_DONTWAIT);
    return n <= 0 ? std::string() : std::string(buffer, static_cast<std::size_t>(n));
  }

 private:
  std::string name_;
  int fd_ = -1;
  bool bound_ = false;
};

std::string unique_name(const char* prefix) {
  return std::string(prefix) + "turnstile-notify-" + std::to_string(::getpid());
}

TEST(SdNotify, SendsOneDatagramToAPath) {
  Listener listener(unique_name("/tmp/"));
  ASSERT_TRUE(listener.bound());
  EXPECT_TRUE(notify_socket(unique_name("/tmp/"), "READY=1\nSTATUS=serving"));
  EXPECT_EQ(listener.receive(), "READY=1\nSTATUS=serving");
  EXPECT_EQ(listener.receive(), "");
}

TEST(SdNotify, SendsToAnAbstractName) {
  Listener listener(unique_name("@"));
  ASSERT_TRUE(listener.bound());
  EXPECT_TRUE(notify_socket(unique_name("@"), "STOPPING=1"));
  EXPECT_EQ(listener.receive(), "STOPPING=1");
}

TEST(SdNotify, FollowsTheEnvironment) {
  Listener listener(unique_name("@env-"));
  ASSERT_TRUE(listener.bound());
  ASSERT_EQ(::setenv("NOTIFY_SOCKET", unique_name("@env-").c_str(), 1), 0);
  EXPECT_TRUE(notify_service_manager("READY=1"));
  EXPECT_EQ(listener.receive(), "READY=1");
  ASSERT_EQ(::unsetenv("NOTIFY_SOCKET"), 0);
  EXPECT_FALSE(notify_service_manager("READY=1"));
  ASSERT_EQ(::setenv("NOTIFY_SOCKET", "", 1), 0);
  EXPECT_FALSE(notify_service_manager("READY=1"));
  ASSERT_EQ(::unsetenv("NOTIFY_SOCKET"), 0);
  EXPECT_EQ(listener.receive(), "");
}

TEST(SdNotify, RefusesBadPathsAndAbsentSockets) {
  EXPECT_FALSE(notify_socket("", "READY=1"));
  EXPECT_FALSE(notify_socket("relative/path", "READY=1"));
  EXPECT_FALSE(notify_socket("/" + std::string(200, 'x'), "READY=1"));
  EXPECT_FALSE(notify_socket(unique_name("/tmp/absent-"), "READY=1"));
}

}  // namespace
}  // namespace turnstile::net
