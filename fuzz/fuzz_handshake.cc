// Fuzzes the raft handshake's codec (core/raft_handshake.h) with the bytes a stranger on the raft
// port may send.
//
// Input: the whole input is offered as a hello, as a connect and as an accept (their sizes
// differ, 48, 344 and 32 bytes, so the seeds hold one valid message each).
//
// Checks:
//  * no decoder crashes, and each refuses only for a reason its message can have;
//  * whatever decodes encodes back to exactly the input (one encoding per message);
//  * decode_connect is read_connect then check_connect, and a connect refused for its fields
//    still reads (the acceptor checks its MAC first);
//  * magic_so_far agrees with the decoders (a message that decodes passes it, one refused for its
//    magic fails it), and once a prefix fails it every longer prefix does;
//  * the MAC inputs are the label, a NUL, the hello and the connect (all of it but its MAC for the
//    connect's MAC), whatever the bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "core/raft_handshake.h"
#include "fuzz/fuzz_input.h"

namespace turnstile::fuzz {
namespace {

namespace hs = core::raft_handshake;
using hs::Refusal;

constexpr const char* kHarness = "fuzz_handshake";

void check(bool condition, const char* what) {
  if (!condition) fail(kHarness, what);
}

bool same(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

bool is_size_refusal(Refusal r) { return r == Refusal::kShort || r == Refusal::kLong; }

void check_size_refusal(Refusal r, std::size_t got, std::size_t size) {
  if (r == Refusal::kShort) check(got < size, "refused as short but long enough");
  if (r == Refusal::kLong) check(got > size, "refused as long but short enough");
}

void check_hello(std::span<const std::uint8_t> in) {
  const std::variant<hs::Hello, Refusal> decoded = hs::decode_hello(in);
  if (const hs::Hello* hello = std::get_if<hs::Hello>(&decoded)) {
    check(in.size() == hs::kHelloSize, "a hello decoded from the wrong number of bytes");
    check(same(hs::encode_hello(*hello), in), "a hello does not encode back to its bytes");
    check(hs::magic_so_far(in), "a hello decoded without its magic");
    return;
  }
  const Refusal r = std::get<Refusal>(decoded);
  check(is_size_refusal(r) || r == Refusal::kBadMagic, "a hello refused for a connect's reason");
  check_size_refusal(r, in.size(), hs::kHelloSize);
  if (r == Refusal::kBadMagic) check(!hs::magic_so_far(in), "a good magic refused as bad");
}

void check_connect(std::span<const std::uint8_t> in) {
  const std::variant<hs::Connect, Refusal> decoded = hs::decode_connect(in);
  const std::variant<hs::ConnectFields, Refusal> read = hs::read_connect(in);
  if (const hs::Connect* connect = std::get_if<hs::Connect>(&decoded)) {
    check(in.size() == hs::kConnectSize, "a connect decoded from the wrong number of bytes");
    check(same(hs::encode_connect(*connect), in), "a connect does not encode back to its bytes");
    check(connect->from != 0, "a connect from node 0 decoded");
    check(!connect->address.empty() && connect->address.size() <= hs::kAddressMax,
          "a connect's address has a length out of range");
    check(connect->address.find('\0') == std::string::npos, "a connect's address holds a NUL");
    check(hs::magic_so_far(in), "a connect decoded without its magic");
    check(std::holds_alternative<hs::ConnectFields>(read), "a connect decodes but does not read");
    const hs::ConnectFields& fields = std::get<hs::ConnectFields>(read);
    check(fields.from == connect->from && fields.to == connect->to &&
              fields.nonce == connect->nonce && fields.mac == connect->mac,
          "read_connect and decode_connect disagree on a field");
    return;
  }
  const Refusal r = std::get<Refusal>(decoded);
  check_size_refusal(r, in.size(), hs::kConnectSize);
  if (is_size_refusal(r) || r == Refusal::kBadMagic) {
    check(std::holds_alternative<Refusal>(read) && std::get<Refusal>(read) == r,
          "read_connect refuses differently from decode_connect");
    if (r == Refusal::kBadMagic) check(!hs::magic_so_far(in), "a good magic refused as bad");
    return;
  }
  // A refusal of the fields: they read, and checking them refuses alike.
  check(std::holds_alternative<hs::ConnectFields>(read),
        "a connect refused for its fields but "
        "does not read");
  const std::variant<hs::Connect, Refusal> checked =
      hs::check_connect(std::get<hs::ConnectFields>(read));
  check(std::holds_alternative<Refusal>(checked) && std::get<Refusal>(checked) == r,
        "check_connect refuses differently from decode_connect");
}

void check_accept(std::span<const std::uint8_t> in) {
  const std::variant<hs::Accept, Refusal> decoded = hs::decode_accept(in);
  if (const hs::Accept* accept = std::get_if<hs::Accept>(&decoded)) {
    check(same(hs::encode_accept(*accept), in), "an accept does not encode back to its bytes");
    return;
  }
  const Refusal r = std::get<Refusal>(decoded);
  check(is_size_refusal(r), "an accept refused for another reason than its length");
  check_size_refusal(r, in.size(), hs::kAcceptSize);
}

// The MAC inputs over the input's first bytes taken as a hello and a connect, whatever they are.
void check_mac_inputs(std::span<const std::uint8_t> in) {
  hs::HelloBytes hello{};
  hs::ConnectBytes connect{};
  std::copy_n(in.begin(), std::min(in.size(), hello.size()), hello.begin());
  const std::span<const std::uint8_t> rest = in.subspan(std::min(in.size(), hello.size()));
  std::copy_n(rest.begin(), std::min(rest.size(), connect.size()), connect.begin());

  const std::vector<std::uint8_t> c = hs::connect_mac_input(hello, connect);
  std::vector<std::uint8_t> want(hs::kConnectLabel.begin(), hs::kConnectLabel.end());
  want.push_back(0);
  want.insert(want.end(), hello.begin(), hello.end());
  want.insert(want.end(), connect.begin(), connect.begin() + hs::kConnectBodySize);
  check(c == want, "the connect's MAC input is not label | NUL | hello | connect body");

  const std::vector<std::uint8_t> a = hs::accept_mac_input(hello, connect);
  want.assign(hs::kAcceptLabel.begin(), hs::kAcceptLabel.end());
  want.push_back(0);
  want.insert(want.end(), hello.begin(), hello.end());
  want.insert(want.end(), connect.begin(), connect.end());
  check(a == want, "the accept's MAC input is not label | NUL | hello | connect");
}

}  // namespace
}  // namespace turnstile::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace turnstile::fuzz;
  const std::span<const std::uint8_t> in(data, size);
  check_hello(in);
  check_connect(in);
  check_accept(in);
  check_mac_inputs(in);
  // A reader checks the magic after every read: once a prefix fails, every longer one fails.
  bool passed = true;
  for (std::size_t n = 0; n <= std::min<std::size_t>(in.size(), 16); ++n) {
    const bool now = turnstile::core::raft_handshake::magic_so_far(in.first(n));
    check(passed || !now, "magic_so_far passes a longer prefix after failing a shorter one");
    passed = now;
  }
  return 0;
}
