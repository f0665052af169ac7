// The raft handshake's messages (docs/cluster.md, "Strangers on the raft port"): their bytes, the
// checks on bytes from the network, and the bytes each MAC covers. The raft transport
// (net/raft_transport.cc) runs the handshake on every new raft connection before raft sees a byte
// of it; it does the reading, the writing, the random nonces and the HMAC itself (OpenSSL), and
// asks this codec what to send, whether what came is a message, and what to MAC.
//
// On every new connection (A: the acceptor, C: the connector):
//
//   A -> C  hello    magic | A's id | nonce_a
//   C -> A  connect  magic | C's id | the id C means to reach | C's raft address | nonce_c | MAC
//   A -> C  accept   MAC
//
// The connect's MAC is HMAC-SHA256(secret, "connect" | NUL | hello | connect up to its MAC), the
// accept's HMAC-SHA256(secret, "accept" | NUL | hello | the whole connect): connect_mac_input()
// and accept_mac_input() give those bytes. Each side checks the other's MAC over a transcript that
// holds its own fresh nonce, so neither message can be replayed or reflected.
//
// The bytes (integers little-endian; offset and size in bytes):
//
//   hello, 48 bytes:       0   8  magic, "TSRAFT01"
//                          8   8  the acceptor's raft id
//                         16  32  nonce_a
//   connect, 344 bytes:    0   8  magic, "TSRAFT01"
//                          8   8  the connector's raft id
//                         16   8  the raft id it means to reach
//                         24 256  the connector's raft address, then NULs to the field's end
//                        280  32  nonce_c
//                        312  32  MAC (the 312 bytes before it are the connect's body)
//   accept, 32 bytes:      0  32  MAC
//
// The address field holds an address of 1 to 255 bytes followed by NULs to its end: its first
// NUL ends the address, and every byte after it is a NUL too. So one message has one encoding:
// what decodes encodes back to exactly the bytes it came from.
//
// Comparing MACs is the transport's job (OpenSSL's CRYPTO_memcmp, which takes the same time
// whatever the bytes, a promise a loop in plain C++ cannot keep against the optimiser).
//
// Thread affinity: plain values and pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace turnstile::core::raft_handshake {

// --- the layout ---------------------------------------------------------------------------------

inline constexpr std::array<std::uint8_t, 8> kMagic = {'T', 'S', 'R', 'A', 'F', 'T', '0', '1'};
inline constexpr std::size_t kMagicSize = kMagic.size();
inline constexpr std::size_t kIdSize = 8;
inline constexpr std::size_t kNonceSize = 32;
inline constexpr std::size_t kMacSize = 32;  // HMAC-SHA256
// The address field: the longest address, and a NUL at least.
inline constexpr std::size_t kAddressMax = 255;
inline constexpr std::size_t kAddressFieldSize = kAddressMax + 1;

// hello: magic | the acceptor's id | nonce_a.
inline constexpr std::size_t kHelloIdOffset = kMagicSize;
inline constexpr std::size_t kHelloNonceOffset = kHelloIdOffset + kIdSize;
inline constexpr std::size_t kHelloSize = kHelloNonceOffset + kNonceSize;

// connect: magic | from | to | address field | nonce_c | MAC. The body is all before the MAC.
inline constexpr std::size_t kConnectFromOffset = kMagicSize;
inline constexpr std::size_t kConnectToOffset = kConnectFromOffset + kIdSize;
inline constexpr std::size_t kConnectAddressOffset = kConnectToOffset + kIdSize;
inline constexpr std::size_t kConnectNonceOffset = kConnectAddressOffset + kAddressFieldSize;
inline constexpr std::size_t kConnectMacOffset = kConnectNonceOffset + kNonceSize;
inline constexpr std::size_t kConnectBodySize = kConnectMacOffset;
inline constexpr std::size_t kConnectSize = kConnectMacOffset + kMacSize;

// accept: the MAC alone.
inline constexpr std::size_t kAcceptSize = kMacSize;

static_assert(kHelloSize == 48);
static_assert(kConnectBodySize == 312 && kConnectSize == 344);
static_assert(kAcceptSize == 32);

// What the MACs are keyed over: each label, a NUL, then the messages (connect_mac_input).
inline constexpr std::string_view kConnectLabel = "connect";
inline constexpr std::string_view kAcceptLabel = "accept";

// --- the messages -------------------------------------------------------------------------------

using Nonce = std::array<std::uint8_t, kNonceSize>;
using Mac = std::array<std::uint8_t, kMacSize>;
using HelloBytes = std::array<std::uint8_t, kHelloSize>;
using ConnectBytes = std::array<std::uint8_t, kConnectSize>;
using AcceptBytes = std::array<std::uint8_t, kAcceptSize>;

struct Hello {
  std::uint64_t id = 0;  // the acceptor's raft id
  Nonce nonce{};
  bool operator==(const Hello&) const = default;
};

struct Connect {
  std::uint64_t from = 0;  // the connector's raft id, never 0
  std::uint64_t to = 0;    // the raft id it means to reach
  std::string address;     // its raft address, 1 to kAddressMax bytes with no NUL
  Nonce nonce{};
  Mac mac{};
  bool operator==(const Connect&) const = default;
};

struct Accept {
  Mac mac{};
  bool operator==(const Accept&) const = default;
};

// Why bytes are not a message.
enum class Refusal : std::uint8_t {
  kShort,             // fewer bytes than the message has
  kLong,              // more bytes than the message has
  kBadMagic,          // hello and connect: it does not open with kMagic
  kZeroId,            // connect: the connector's id is 0, which no raft node has
  kEmptyAddress,      // connect: the address field opens with a NUL
  kAddressTooLong,    // connect: no NUL in the address field
  kAddressNotPadded,  // connect: a byte after the address's NUL is not a NUL
};

// A short name for the log and the tests: "short", "bad-magic", "address-not-padded", ...
std::string_view refusal_name(Refusal refusal);

// Whether `prefix`, the first bytes read of a hello or a connect, can still open one: its first
// min(size, kMagicSize) bytes are the magic's. A reader closes a connection at the first byte
// that differs, without waiting for the rest.
bool magic_so_far(std::span<const std::uint8_t> prefix);

// --- encoding -----------------------------------------------------------------------------------

HelloBytes encode_hello(const Hello& hello);
// An address longer than kAddressMax is cut to its first kAddressMax bytes (the raft node refuses
// such an address at start-up, so it is never sent); `address` must hold no NUL.
ConnectBytes encode_connect(const Connect& connect);
AcceptBytes encode_accept(const Accept& accept);

// --- decoding: any bytes, from anyone -----------------------------------------------------------

std::variant<Hello, Refusal> decode_hello(std::span<const std::uint8_t> bytes);

// A connect's fields as they stand, before any is checked: what the acceptor reads to check the
// MAC, which it does before it looks at the rest (only a connector that proved the secret is told
// its message is malformed, and named a peer).
struct ConnectFields {
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  std::array<std::uint8_t, kAddressFieldSize> address_field{};
  Nonce nonce{};
  Mac mac{};
};
// kShort, kLong or kBadMagic, or the fields.
std::variant<ConnectFields, Refusal> read_connect(std::span<const std::uint8_t> bytes);
// The message, or why its fields are not one (kZeroId, kEmptyAddress, kAddressTooLong,
// kAddressNotPadded, in that order).
std::variant<Connect, Refusal> check_connect(const ConnectFields& fields);
// read_connect, then check_connect.
std::variant<Connect, Refusal> decode_connect(std::span<const std::uint8_t> bytes);

std::variant<Accept, Refusal> decode_accept(std::span<const std::uint8_t> bytes);

// --- what the MACs cover ------------------------------------------------------------------------

// kConnectLabel | NUL | hello | the first kConnectBodySize bytes of connect (its MAC field is not
// read, so it may be anything while the MAC is being computed).
std::vector<std::uint8_t> connect_mac_input(const HelloBytes& hello, const ConnectBytes& connect);
// kAcceptLabel | NUL | hello | the whole connect.
std::vector<std::uint8_t> accept_mac_input(const HelloBytes& hello, const ConnectBytes& connect);

}  // namespace turnstile::core::raft_handshake
