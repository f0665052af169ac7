#include "core/raft_handshake.h"

#include <algorithm>
#include <optional>

namespace turnstile::core::raft_handshake {

namespace {

void put_u64(std::uint8_t* out, std::uint64_t value) {
  for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<std::uint8_t>(value >> (8 * i));
}

std::uint64_t get_u64(const std::uint8_t* in) {
  std::uint64_t value = 0;
  for (std::size_t i = 8; i-- > 0;) value = (value << 8) | in[i];
  return value;
}

// kShort or kLong when `bytes` are not `size` bytes long.
std::optional<Refusal> size_refusal(std::span<const std::uint8_t> bytes, std::size_t size) {
  if (bytes.size() < size) return Refusal::kShort;
  if (bytes.size() > size) return Refusal::kLong;
  return std::nullopt;
}

bool opens_with_magic(std::span<const std::uint8_t> bytes) {
  return bytes.size() >= kMagicSize && std::equal(kMagic.begin(), kMagic.end(), bytes.begin());
}

std::vector<std::uint8_t> mac_input(std::string_view label, const HelloBytes& hello,
                                    std::span<const std::uint8_t> connect) {
  std::vector<std::uint8_t> data;
  data.reserve(label.size() + 1 + hello.size() + connect.size());
  data.insert(data.end(), label.begin(), label.end());
  data.push_back(0);
  data.insert(data.end(), hello.begin(), hello.end());
  data.insert(data.end(), connect.begin(), connect.end());
  return data;
}

}  // namespace

std::string_view refusal_name(Refusal refusal) {
  switch (refusal) {
    case Refusal::kShort:
      return "short";
    case Refusal::kLong:
      return "long";
    case Refusal::kBadMagic:
      return "bad-magic";
    case Refusal::kZeroId:
      return "zero-id";
    case Refusal::kEmptyAddress:
      return "empty-address";
    case Refusal::kAddressTooLong:
      return "address-too-long";
    case Refusal::kAddressNotPadded:
      return "address-not-padded";
  }
  return "?";
}

bool magic_so_far(std::span<const std::uint8_t> prefix) {
  const std::size_t n = std::min(prefix.size(), kMagicSize);
  return std::equal(prefix.begin(), prefix.begin() + static_cast<std::ptrdiff_t>(n),
                    kMagic.begin());
}

HelloBytes encode_hello(const Hello& hello) {
  HelloBytes out{};
  std::copy(kMagic.begin(), kMagic.end(), out.begin());
  put_u64(out.data() + kHelloIdOffset, hello.id);
  std::copy(hello.nonce.begin(), hello.nonce.end(), out.begin() + kHelloNonceOffset);
  return out;
}

ConnectBytes encode_connect(const Connect& connect) {
  ConnectBytes out{};  // the address field's padding is these zeros
  std::copy(kMagic.begin(), kMagic.end(), out.begin());
  put_u64(out.data() + kConnectFromOffset, connect.from);
  put_u64(out.data() + kConnectToOffset, connect.to);
  const std::size_t address_len = std::min(connect.address.size(), kAddressMax);
  std::copy_n(connect.address.begin(), address_len, out.begin() + kConnectAddressOffset);
  std::copy(connect.nonce.begin(), connect.nonce.end(), out.begin() + kConnectNonceOffset);
  std::copy(connect.mac.begin(), connect.mac.end(), out.begin() + kConnectMacOffset);
  return out;
}

AcceptBytes encode_accept(const Accept& accept) { return accept.mac; }

std::variant<Hello, Refusal> decode_hello(std::span<const std::uint8_t> bytes) {
  if (const std::optional<Refusal> r = size_refusal(bytes, kHelloSize)) return *r;
  if (!opens_with_magic(bytes)) return Refusal::kBadMagic;
  Hello hello;
  hello.id = get_u64(bytes.data() + kHelloIdOffset);
  std::copy_n(bytes.begin() + kHelloNonceOffset, kNonceSize, hello.nonce.begin());
  return hello;
}

std::variant<ConnectFields, Refusal> read_connect(std::span<const std::uint8_t> bytes) {
  if (const std::optional<Refusal> r = size_refusal(bytes, kConnectSize)) return *r;
  if (!opens_with_magic(bytes)) return Refusal::kBadMagic;
  ConnectFields fields;
  fields.from = get_u64(bytes.data() + kConnectFromOffset);
  fields.to = get_u64(bytes.data() + kConnectToOffset);
  std::copy_n(bytes.begin() + kConnectAddressOffset, kAddressFieldSize,
              fields.address_field.begin());
  std::copy_n(bytes.begin() + kConnectNonceOffset, kNonceSize, fields.nonce.begin());
  std::copy_n(bytes.begin() + kConnectMacOffset, kMacSize, fields.mac.begin());
  return fields;
}

std::variant<Connect, Refusal> check_connect(const ConnectFields& fields) {
  if (fields.from == 0) return Refusal::kZeroId;
  const auto& field = fields.address_field;
  const auto nul = std::find(field.begin(), field.end(), std::uint8_t{0});
  if (nul == field.begin()) return Refusal::kEmptyAddress;
  if (nul == field.end()) return Refusal::kAddressTooLong;
  if (std::any_of(nul, field.end(), [](std::uint8_t b) { return b != 0; })) {
    return Refusal::kAddressNotPadded;
  }
  Connect connect;
  connect.from = fields.from;
  connect.to = fields.to;
  connect.address.assign(field.begin(), nul);
  connect.nonce = fields.nonce;
  connect.mac = fields.mac;
  return connect;
}

std::variant<Connect, Refusal> decode_connect(std::span<const std::uint8_t> bytes) {
  std::variant<ConnectFields, Refusal> read = read_connect(bytes);
  if (const Refusal* r = std::get_if<Refusal>(&read)) return *r;
  return check_connect(std::get<ConnectFields>(read));
}

std::variant<Accept, Refusal> decode_accept(std::span<const std::uint8_t> bytes) {
  if (const std::optional<Refusal> r = size_refusal(bytes, kAcceptSize)) return *r;
  Accept accept;
  std::copy_n(bytes.begin(), kMacSize, accept.mac.begin());
  return accept;
}

std::vector<std::uint8_t> connect_mac_input(const HelloBytes& hello, const ConnectBytes& connect) {
  return mac_input(kConnectLabel, hello, std::span(connect).first(kConnectBodySize));
}

std::vector<std::uint8_t> accept_mac_input(const HelloBytes& hello, const ConnectBytes& connect) {
  return mac_input(kAcceptLabel, hello, connect);
}

}  // namespace turnstile::core::raft_handshake
