// The raft handshake's codec (core/raft_handshake.h): the bytes of each message against a layout
// written out here by hand, what each MAC covers, every refusal, and as properties that every
// message round-trips and that bytes which decode encode back to themselves.
#include "core/raft_handshake.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace turnstile::core::raft_handshake {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes text(std::string_view s) { return Bytes(s.begin(), s.end()); }

Bytes le64(std::uint64_t v) {
  Bytes out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  return out;
}

template <std::size_t N>
std::array<std::uint8_t, N> counting(std::uint8_t first) {
  std::array<std::uint8_t, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = static_cast<std::uint8_t>(first + i);
  return out;
}

void append(Bytes& to, const auto& from) { to.insert(to.end(), from.begin(), from.end()); }

Hello sample_hello() {
  Hello hello;
  hello.id = 0x0102030405060708;
  hello.nonce = counting<kNonceSize>(0x10);
  return hello;
}

Connect sample_connect() {
  Connect connect;
  connect.from = 3;
  connect.to = 0x1122334455667788;
  connect.address = "10.0.0.3:7000";
  connect.nonce = counting<kNonceSize>(0x40);
  connect.mac = counting<kMacSize>(0x80);
  return connect;
}

// The connect's bytes, with the address field given whole.
Bytes connect_with_field(const Bytes& field) {
  Bytes out = text("TSRAFT01");
  append(out, le64(3));
  append(out, le64(0x1122334455667788));
  append(out, field);
  append(out, counting<kNonceSize>(0x40));
  append(out, counting<kMacSize>(0x80));
  return out;
}

Bytes padded(std::string_view address) {
  Bytes field = text(address);
  field.resize(256, 0);
  return field;
}

template <class V>
Refusal refusal_of(const V& result) {
  EXPECT_TRUE(std::holds_alternative<Refusal>(result));
  return std::holds_alternative<Refusal>(result) ? std::get<Refusal>(result) : Refusal::kShort;
}

TEST(RaftHandshake, HelloBytesAreTheDocumentedLayout) {
  Bytes expected = text("TSRAFT01");
  append(expected, Bytes{0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01});
  append(expected, counting<32>(0x10));
  ASSERT_EQ(expected.size(), 48u);
  const HelloBytes bytes = encode_hello(sample_hello());
  EXPECT_EQ(Bytes(bytes.begin(), bytes.end()), expected);
}

TEST(RaftHandshake, ConnectBytesAreTheDocumentedLayout) {
  Bytes expected = text("TSRAFT01");                                        // 0..8
  append(expected, Bytes{3, 0, 0, 0, 0, 0, 0, 0});                          // 8..16
  append(expected, Bytes{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11});  // 16..24
  append(expected, text("10.0.0.3:7000"));                                  // 24..37
  expected.resize(280, 0);                                                  // ..280
  append(expected, counting<32>(0x40));                                     // 280..312
  append(expected, counting<32>(0x80));                                     // 312..344
  ASSERT_EQ(expected.size(), 344u);
  const ConnectBytes bytes = encode_connect(sample_connect());
  EXPECT_EQ(Bytes(bytes.begin(), bytes.end()), expected);
}

TEST(RaftHandshake, AcceptBytesAreTheMac) {
  const AcceptBytes bytes = encode_accept(Accept{counting<32>(0xa0)});
  const Mac mac = counting<32>(0xa0);
  EXPECT_EQ(Bytes(bytes.begin(), bytes.end()), Bytes(mac.begin(), mac.end()));
}

TEST(RaftHandshake, TheConnectMacCoversLabelNulHelloAndTheConnectUpToItsMac) {
  const HelloBytes hello = encode_hello(sample_hello());
  const ConnectBytes connect = encode_connect(sample_connect());
  Bytes expected = text("connect");
  expected.push_back(0);
  append(expected, hello);
  expected.insert(expected.end(), connect.begin(), connect.begin() + 312);
  EXPECT_EQ(connect_mac_input(hello, connect), expected);
  // The MAC field is not covered: the connector computes the MAC with zeros there.
  Connect unsealed = sample_connect();
  unsealed.mac = {};
  EXPECT_EQ(connect_mac_input(hello, encode_connect(unsealed)), expected);
}

TEST(RaftHandshake, TheAcceptMacCoversLabelNulHelloAndTheWholeConnect) {
  const HelloBytes hello = encode_hello(sample_hello());
  const ConnectBytes connect = encode_connect(sample_connect());
  Bytes expected = text("accept");
  expected.push_back(0);
  append(expected, hello);
  append(expected, connect);
  EXPECT_EQ(accept_mac_input(hello, connect), expected);
}

TEST(RaftHandshake, EachMessageRoundTrips) {
  const HelloBytes hello = encode_hello(sample_hello());
  EXPECT_EQ(std::get<Hello>(decode_hello(hello)), sample_hello());
  const ConnectBytes connect = encode_connect(sample_connect());
  EXPECT_EQ(std::get<Connect>(decode_connect(connect)), sample_connect());
  const Accept accept{counting<32>(7)};
  EXPECT_EQ(std::get<Accept>(decode_accept(encode_accept(accept))), accept);
}

TEST(RaftHandshake, AnAddressOfTheLongestLengthRoundTripsAndALongerOneIsCut) {
  Connect connect = sample_connect();
  connect.address = std::string(kAddressMax, 'a');
  EXPECT_EQ(std::get<Connect>(decode_connect(encode_connect(connect))), connect);
  Connect longer = connect;
  longer.address += "bc";
  EXPECT_EQ(encode_connect(longer), encode_connect(connect));
}

TEST(RaftHandshake, WrongLengthsAreRefused) {
  const HelloBytes hello = encode_hello(sample_hello());
  Bytes h(hello.begin(), hello.end());
  EXPECT_EQ(refusal_of(decode_hello(std::span(h).first(47))), Refusal::kShort);
  EXPECT_EQ(refusal_of(decode_hello({})), Refusal::kShort);
  h.push_back(0);
  EXPECT_EQ(refusal_of(decode_hello(h)), Refusal::kLong);

  const ConnectBytes connect = encode_connect(sample_connect());
  Bytes c(connect.begin(), connect.end());
  EXPECT_EQ(refusal_of(decode_connect(std::span(c).first(343))), Refusal::kShort);
  EXPECT_EQ(refusal_of(read_connect(std::span(c).first(8))), Refusal::kShort);
  c.push_back(0);
  EXPECT_EQ(refusal_of(decode_connect(c)), Refusal::kLong);

  const Bytes a(33, 0);
  EXPECT_EQ(refusal_of(decode_accept(std::span(a).first(31))), Refusal::kShort);
  EXPECT_EQ(refusal_of(decode_accept(a)), Refusal::kLong);
}

TEST(RaftHandshake, AWrongMagicIsRefused) {
  HelloBytes hello = encode_hello(sample_hello());
  hello[7] = '2';  // TSRAFT02
  EXPECT_EQ(refusal_of(decode_hello(hello)), Refusal::kBadMagic);
  ConnectBytes connect = encode_connect(sample_connect());
  connect[0] = 't';
  EXPECT_EQ(refusal_of(read_connect(connect)), Refusal::kBadMagic);
  EXPECT_EQ(refusal_of(decode_connect(connect)), Refusal::kBadMagic);
}

TEST(RaftHandshake, AConnectFromNodeZeroIsRefused) {
  Connect connect = sample_connect();
  connect.from = 0;
  EXPECT_EQ(refusal_of(decode_connect(encode_connect(connect))), Refusal::kZeroId);
  // Its fields still read, for the MAC check that comes first.
  const auto fields = read_connect(encode_connect(connect));
  ASSERT_TRUE(std::holds_alternative<ConnectFields>(fields));
  EXPECT_EQ(std::get<ConnectFields>(fields).from, 0u);
  EXPECT_EQ(std::get<ConnectFields>(fields).mac, sample_connect().mac);
}

TEST(RaftHandshake, AddressFieldsThatAreNotOneAddressAndNulsAreRefused) {
  EXPECT_EQ(refusal_of(decode_connect(connect_with_field(Bytes(256, 0)))), Refusal::kEmptyAddress);
  EXPECT_EQ(refusal_of(decode_connect(connect_with_field(Bytes(256, 'a')))),
            Refusal::kAddressTooLong);
  Bytes field = padded("10.0.0.3:7000");
  field[200] = 'x';  // after the NUL that ends the address
  EXPECT_EQ(refusal_of(decode_connect(connect_with_field(field))), Refusal::kAddressNotPadded);
  field = padded("10.0.0.3:7000");
  field[255] = 1;
  EXPECT_EQ(refusal_of(decode_connect(connect_with_field(field))), Refusal::kAddressNotPadded);
  // The same address padded with NULs is the sample.
  EXPECT_EQ(std::get<Connect>(decode_connect(connect_with_field(padded("10.0.0.3:7000")))),
            sample_connect());
}

TEST(RaftHandshake, TheMagicIsCheckedAsItArrives) {
  const Bytes magic = text("TSRAFT01");
  EXPECT_TRUE(magic_so_far({}));
  EXPECT_TRUE(magic_so_far(std::span(magic).first(3)));
  EXPECT_TRUE(magic_so_far(magic));
  Bytes more = magic;
  more.push_back(0xff);  // what follows the magic is not its business
  EXPECT_TRUE(magic_so_far(more));
  EXPECT_FALSE(magic_so_far(text("TSX")));
  EXPECT_FALSE(magic_so_far(text("GET / HTTP/1.1")));
}

TEST(RaftHandshake, EveryRefusalHasAName) {
  for (Refusal r : {Refusal::kShort, Refusal::kLong, Refusal::kBadMagic, Refusal::kZeroId,
                    Refusal::kEmptyAddress, Refusal::kAddressTooLong, Refusal::kAddressNotPadded}) {
    EXPECT_NE(refusal_name(r), "?");
  }
  EXPECT_EQ(refusal_name(Refusal::kAddressNotPadded), "address-not-padded");
}

RC_GTEST_PROP(RaftHandshakeProperty, EveryConnectRoundTrips,
              (std::uint64_t from, std::uint64_t to, std::vector<std::uint8_t> nonce_seed)) {
  RC_PRE(from != 0u);
  const std::string address = *rc::gen::container<std::string>(
      *rc::gen::inRange<std::size_t>(1, kAddressMax + 1), rc::gen::inRange<char>(1, 127));
  Connect connect;
  connect.from = from;
  connect.to = to;
  connect.address = address;
  for (std::size_t i = 0; i < kNonceSize && i < nonce_seed.size(); ++i) {
    connect.nonce[i] = nonce_seed[i];
    connect.mac[kMacSize - 1 - i] = nonce_seed[i];
  }
  const ConnectBytes bytes = encode_connect(connect);
  RC_ASSERT(std::get<Connect>(decode_connect(bytes)) == connect);
}

RC_GTEST_PROP(RaftHandshakeProperty, BytesThatDecodeEncodeBackToThemselves,
              (std::vector<std::uint8_t> noise, std::size_t at)) {
  // A valid connect with a few bytes overwritten: some decode, most do not.
  ConnectBytes bytes = encode_connect(sample_connect());
  for (std::size_t i = 0; i < noise.size(); ++i) bytes[(at + i * 37) % kConnectSize] = noise[i];
  const auto decoded = decode_connect(bytes);
  if (const Connect* connect = std::get_if<Connect>(&decoded)) {
    RC_ASSERT(encode_connect(*connect) == bytes);
  }
  HelloBytes hello{};
  for (std::size_t i = 0; i < kHelloSize; ++i) hello[i] = bytes[i];
  const auto hello_decoded = decode_hello(hello);
  if (const Hello* h = std::get_if<Hello>(&hello_decoded)) RC_ASSERT(encode_hello(*h) == hello);
}

}  // namespace
}  // namespace turnstile::core::raft_handshake
