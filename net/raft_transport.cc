#include "net/raft_transport.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "core/assert.h"
#include "core/handshake_slots.h"
#include "core/raft_handshake.h"

namespace turnstile::net {

namespace {

using LogFn = RaftTransport::LogFn;

std::string uv_error(int code) { return uv_strerror(code); }

// --- the handshake --------------------------------------------------------------------------
//
// On every new connection, before raft sees a byte of it, the acceptor sends a hello, the
// connector a connect and the acceptor an accept (core/raft_handshake.h has their bytes, their
// checks and what each MAC covers; here are the reads and writes, the nonces and the HMACs). Each
// side reads exactly one message's length at a time, and neither sends anything more before it
// has the other's last message, so no raft byte is ever read here. Then the stream goes to raft:
// the acceptor's with the connector's id and address (raft's accept callback), the connector's to
// raft's connect callback.

namespace hs = core::raft_handshake;

// An incoming connection's first message is due this long after it is accepted (or within the
// handshake timeout, when that is shorter): a peer sends it one round trip after the accept.
constexpr unsigned kFirstMessageMs = 500;
// The same handshake failure from the same peer is logged at most this often.
constexpr std::uint64_t kLogRepeatMs = 10'000;

core::HandshakeSlotsConfig slots_config(unsigned timeout_ms) {
  core::HandshakeSlotsConfig config;  // 64 at once, 8 per source, 16 for known peers only
  config.first_message = core::Duration::milliseconds(std::min(kFirstMessageMs, timeout_ms));
  return config;
}

// HMAC-SHA256(secret, data); false if OpenSSL fails. `data` is what the codec says the MAC
// covers (hs::connect_mac_input, hs::accept_mac_input).
bool compute_mac(const std::string& secret, const std::vector<std::uint8_t>& data, hs::Mac& out) {
  static const unsigned char kNoKey = 0;  // OpenSSL wants a pointer even for an empty key
  const void* key = secret.empty() ? static_cast<const void*>(&kNoKey) : secret.data();
  unsigned int len = 0;
  return HMAC(EVP_sha256(), key, static_cast<int>(secret.size()), data.data(), data.size(),
              out.data(), &len) != nullptr &&
         len == out.size();
}

// --- the transport --------------------------------------------------------------------------

class Transport;

// One connection in its handshake, either way. It owns its TCP handle (raft_malloc'd: raft frees
// it with raft_free once it is raft's) until the hand-off, and its timer until that is closed.
struct Handshake {
  enum class Step { kResolving, kConnecting, kHello, kConnect, kAccept, kVerified };

  Transport* transport = nullptr;
  bool outgoing = false;
  Step step = Step::kHello;
  uv_tcp_t* tcp = nullptr;
  uv_timer_t timer{};
  uv_getaddrinfo_t resolve{};
  uv_connect_t connect{};
  std::array<uv_write_t, 2> writes{};
  int open_handles = 0;  // tcp and timer, until their close callbacks
  int writes_in_flight = 0;
  bool resolving = false;
  bool failed = false;
  bool handed_off = false;
  int status = RAFT_NOCONNECTION;  // for raft's connect callback on failure

  // Outgoing: raft's request, the node it wants and where. Incoming: who connected, and the id
  // and raft address it proved.
  raft_uv_connect* req = nullptr;
  raft_uv_connect_cb cb = nullptr;
  std::uint64_t peer_id = 0;
  std::string peer_address;
  // Incoming: the other end's host, for the log (a stranger's lines repeat per host, not per
  // connection); outgoing: the address dialed.
  std::string peer_name;
  std::string source;            // incoming: its source key (net/raft_address.h)
  core::HandshakeSlot slot = 0;  // incoming: the slot it holds until it proves the secret; 0: none
  unsigned timer_ms = 0;         // what the timer was last set to, for the log

  hs::HelloBytes hello{};
  hs::ConnectBytes connect_msg{};
  hs::AcceptBytes accept_msg{};
  unsigned char* in = nullptr;  // the message being read
  std::size_t in_want = 0;
  std::size_t in_got = 0;
};

// raft's transport interface (raft/uv.h) over TCP, with the handshake above on every stream.
// Runs on the loop's thread only.
class Transport {
 public:
  Transport(uv_loop_t* loop, std::string secret, std::string bind_address, unsigned timeout_ms,
            LogFn log)
      : loop_(loop),
        secret_(std::move(secret)),
        bind_address_(std::move(bind_address)),
        timeout_ms_(timeout_ms),
        log_(std::move(log)),
        slots_(slots_config(timeout_ms)) {
    iface_.impl = this;  // raft_uv_init takes iface_.data for itself
    iface_.init = &Transport::init_cb;
    iface_.listen = &Transport::listen_cb;
    iface_.connect = &Transport::connect_cb;
    iface_.close = &Transport::close_cb;
    uv_tcp_init(loop_, &listener_);
    listener_.data = this;
    listener_open_ = true;
  }
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  raft_uv_transport* raft() { return &iface_; }
  const std::string& listen_error() const { return listen_error_; }

  void learn_peers(const std::vector<std::string>& configured) {
    for (const std::string& address : configured) {
      if (std::optional<std::string> key = source_key_of(address)) slots_.learn(*key);
    }
  }

  // When raft never took the transport (raft_init failed): close the listener handle so that
  // the loop can end.
  void close_unused() {
    if (listener_open_ && !closing_) {
      closing_ = true;
      uv_close(reinterpret_cast<uv_handle_t*>(&listener_), &Transport::on_listener_closed);
    }
  }

 private:
  static Transport* self(raft_uv_transport* t) { return static_cast<Transport*>(t->impl); }

  // raft_uv_transport->init: who we are.
  static int init_cb(raft_uv_transport* t, raft_id id, const char* address) {
    self(t)->id_ = id;
    self(t)->address_ = address;
    return 0;
  }

  // raft_uv_transport->listen.
  static int listen_cb(raft_uv_transport* t, raft_uv_accept_cb cb) {
    Transport* me = self(t);
    me->accept_cb_ = cb;
    const std::string& where = me->bind_address_.empty() ? me->address_ : me->bind_address_;
    auto fail = [&](const std::string& why) {
      me->listen_error_ = "cannot listen for raft traffic on " + where + ": " + why;
      std::snprintf(t->errmsg, sizeof t->errmsg, "%s", me->listen_error_.c_str());
      return RAFT_IOERR;
    };
    const std::optional<HostPort> hp = split_host_port(where);
    if (!hp) return fail("not a host:port address");
    sockaddr_storage addr{};
    if (!parse_numeric(*hp, &addr)) {
      // A name: resolve it here, synchronously (once, at start-up).
      uv_getaddrinfo_t req{};
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      const int rc =
          uv_getaddrinfo(me->loop_, &req, nullptr, hp->host.c_str(), hp->port.c_str(), &hints);
      if (rc != 0 || req.addrinfo == nullptr) return fail(uv_error(rc));
      std::memcpy(&addr, req.addrinfo->ai_addr, req.addrinfo->ai_addrlen);
      uv_freeaddrinfo(req.addrinfo);
    }
    int rc = uv_tcp_bind(&me->listener_, reinterpret_cast<const sockaddr*>(&addr), 0);
    if (rc == 0) {
      rc =
          uv_listen(reinterpret_cast<uv_stream_t*>(&me->listener_), 128, &Transport::on_connection);
    }
    if (rc != 0) return fail(uv_error(rc));
    return 0;
  }

  // raft_uv_transport->connect: `cb` fires later, with a stream that passed the handshake or
  // with an error.
  static int connect_cb(raft_uv_transport* t, raft_uv_connect* req, raft_id id, const char* address,
                        raft_uv_connect_cb cb) {
    Transport* me = self(t);
    if (me->closing_) return RAFT_CANCELED;
    const std::optional<HostPort> hp = split_host_port(dial_address(address));
    if (!hp) {
      me->log_limited(std::string("bad-address:") + address,
                      "cannot connect to node " + std::to_string(id) + ": its raft address '" +
                          address + "' is not host:port");
      return RAFT_NOCONNECTION;  // raft retries later; the configuration needs fixing
    }
    // Whom we dial is a peer: its connections to us get the room kept for peers.
    if (std::optional<std::string> key = source_key_of(address)) me->slots_.learn(*key);
    Handshake* h = me->new_handshake(true);
    if (h == nullptr) return RAFT_NOMEM;
    req->cb = cb;  // raft leaves it to the transport, as raft_uv_tcp does
    h->req = req;
    h->cb = cb;
    h->peer_id = id;
    h->peer_address = address;
    h->peer_name = address;
    sockaddr_storage addr{};
    if (parse_numeric(*hp, &addr)) {
      me->start_connect(h, reinterpret_cast<const sockaddr*>(&addr));
      return 0;
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    h->step = Handshake::Step::kResolving;
    h->resolve.data = h;
    const int rc = uv_getaddrinfo(me->loop_, &h->resolve, &Transport::on_resolved, hp->host.c_str(),
                                  hp->port.c_str(), &hints);
    if (rc != 0) {
      me->fail(h, RAFT_NOCONNECTION,
               "cannot resolve " + std::string(address) + ": " + uv_error(rc));
    } else {
      h->resolving = true;
    }
    return 0;
  }

  // raft_uv_transport->close: stop listening, abandon every handshake (raft's connect requests
  // get RAFT_CANCELED), then `cb`, always from a later callback.
  static void close_cb(raft_uv_transport* t, raft_uv_transport_close_cb cb) {
    Transport* me = self(t);
    me->closing_ = true;
    me->close_cb_ = cb;
    if (me->listener_open_) {
      uv_close(reinterpret_cast<uv_handle_t*>(&me->listener_), &Transport::on_listener_closed);
    }
    std::vector<Handshake*> all;
    for (auto& [ptr, owned] : me->handshakes_) all.push_back(ptr);
    for (Handshake* h : all) me->fail(h, RAFT_CANCELED, "");
    me->maybe_closed();
  }

  static void on_listener_closed(uv_handle_t* handle) {
    Transport* me = static_cast<Transport*>(handle->data);
    me->listener_open_ = false;
    me->maybe_closed();
  }

  void maybe_closed() {
    if (!closing_ || listener_open_ || !handshakes_.empty() || close_cb_ == nullptr) return;
    raft_uv_transport_close_cb cb = close_cb_;
    close_cb_ = nullptr;
    cb(&iface_);
  }

  // nullptr when out of memory.
  Handshake* new_handshake(bool outgoing) {
    auto* tcp = static_cast<uv_tcp_t*>(raft_malloc(sizeof(uv_tcp_t)));
    if (tcp == nullptr) return nullptr;
    auto owned = std::make_unique<Handshake>();
    Handshake* h = owned.get();
    h->transport = this;
    h->outgoing = outgoing;
    h->tcp = tcp;
    uv_tcp_init(loop_, h->tcp);
    h->tcp->data = h;
    uv_timer_init(loop_, &h->timer);
    h->timer.data = h;
    h->open_handles = 2;
    arm_timer(h, timeout_ms_);
    handshakes_.emplace(h, std::move(owned));
    return h;
  }

  // --- incoming ---

  static void on_connection(uv_stream_t* server, int status) {
    Transport* me = static_cast<Transport*>(server->data);
    if (status < 0) {
      me->log_limited("accept", "accepting a raft connection failed: " + uv_error(status));
      return;
    }
    if (me->closing_) return;
    Handshake* h = me->new_handshake(false);
    if (h == nullptr) {
      me->log_limited("oom", "out of memory: cannot accept a raft connection");
      return;
    }
    const int rc = uv_accept(server, reinterpret_cast<uv_stream_t*>(h->tcp));
    if (rc != 0) {
      me->fail(h, RAFT_NOCONNECTION, "");
      return;
    }
    sockaddr_storage addr{};
    int len = sizeof addr;
    if (uv_tcp_getpeername(h->tcp, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      me->fail(h, RAFT_NOCONNECTION, "");  // gone already
      return;
    }
    h->source = source_key(reinterpret_cast<const sockaddr*>(&addr));
    const std::string name = address_name(reinterpret_cast<const sockaddr*>(&addr));
    h->peer_name = name.substr(0, name.rfind(':'));
    if (!me->admit(h)) return;
    me->tune(h->tcp);
    hs::Hello hello;
    hello.id = me->id_;
    if (RAND_bytes(hello.nonce.data(), static_cast<int>(hello.nonce.size())) != 1) {
      me->fail(h, RAFT_NOCONNECTION, "OpenSSL RAND_bytes failed: cannot run the raft handshake");
      return;
    }
    h->hello = hs::encode_hello(hello);
    h->step = Handshake::Step::kConnect;
    if (me->write(h, 0, h->hello.data(), h->hello.size())) {
      me->read(h, h->connect_msg.data(), h->connect_msg.size());
    }
  }

  // A slot for an accepted connection (core/handshake_slots.h), and its first-message deadline;
  // false if it was refused (h is failing).
  bool admit(Handshake* h) {
    const core::HandshakeAdmission a = slots_.admit(h->source, now());
    if (a.evicted) {
      const auto it = by_slot_.find(*a.evicted);
      TS_ASSERT(it != by_slot_.end());
      Handshake* victim = it->second;
      by_slot_.erase(it);
      victim->slot = 0;
      log_limited("evicted:" + victim->peer_name,
                  "closed an unfinished raft handshake from " + victim->peer_name +
                      " to make room for a newer connection (" + slots_limits() + ")");
      fail(victim, RAFT_NOCONNECTION, "");
    }
    if (!a.admitted) {
      log_limited("refused:" + h->peer_name, "refused a raft connection from " + h->peer_name +
                                                 ": known peers hold every handshake slot (" +
                                                 slots_limits() + ")");
      fail(h, RAFT_NOCONNECTION, "");
      return false;
    }
    h->slot = a.slot;
    by_slot_.emplace(a.slot, h);
    arm_timer(h, static_cast<unsigned>((a.deadline - now()).ns() / 1'000'000));
    return true;
  }

  std::string slots_limits() const {
    const core::HandshakeSlotsConfig& c = slots_.config();
    return std::to_string(c.capacity) + " unfinished handshakes at once, " +
           std::to_string(c.per_source_max) + " from one host, " +
           std::to_string(c.reserved_for_known) + " kept for the cluster's peers";
  }

  // The slot goes back (the connection proved the secret, or is closing).
  void release_slot(Handshake* h) {
    if (h->slot == 0) return;
    slots_.release(h->slot);
    by_slot_.erase(h->slot);
    h->slot = 0;
  }

  core::Instant now() const {
    return core::Instant::from_ns(static_cast<std::int64_t>(uv_now(loop_)) * 1'000'000);
  }

  void arm_timer(Handshake* h, unsigned ms) {
    h->timer_ms = ms;
    uv_timer_start(&h->timer, &Transport::on_timeout, ms, 0);
  }

  // The connector's message is in: check it, answer, and hand the stream to raft. Its MAC is
  // checked before its other fields: only a connector that knows the secret is told that its
  // message is malformed, and has its host learned as a peer's.
  void on_connect_message(Handshake* h) {
    const std::string who = "raft connection from " + h->peer_name;
    const std::variant<hs::ConnectFields, hs::Refusal> framed = hs::read_connect(h->connect_msg);
    if (std::holds_alternative<hs::Refusal>(framed)) {
      fail(h, RAFT_NOCONNECTION, "refused a " + who + ": not a turnstile raft handshake");
      return;
    }
    const hs::ConnectFields& fields = std::get<hs::ConnectFields>(framed);
    hs::Mac expected{};
    if (!compute_mac(secret_, hs::connect_mac_input(h->hello, h->connect_msg), expected)) {
      fail(h, RAFT_NOCONNECTION, "refused a " + who + ": HMAC failed");
      return;
    }
    if (CRYPTO_memcmp(expected.data(), fields.mac.data(), hs::kMacSize) != 0) {
      fail(h, RAFT_NOCONNECTION,
           "refused a " + who + " claiming to be node " + std::to_string(fields.from) +
               ": authentication failed (a different cluster secret?)");
      return;
    }
    // It knows the secret: its host's later connections get the room kept for peers.
    slots_.learn(h->source);
    const std::variant<hs::Connect, hs::Refusal> checked = hs::check_connect(fields);
    if (std::holds_alternative<hs::Refusal>(checked)) {
      fail(h, RAFT_NOCONNECTION, "refused a " + who + ": malformed handshake");
      return;
    }
    const hs::Connect& connect = std::get<hs::Connect>(checked);
    if (connect.to != id_) {
      fail(h, RAFT_NOCONNECTION,
           "refused a " + who + " (node " + std::to_string(connect.from) + "): it wants node " +
               std::to_string(connect.to) + ", but this is node " + std::to_string(id_) +
               " (check the raft addresses in the cluster's configuration)");
      return;
    }
    h->peer_id = connect.from;
    h->peer_address = connect.address;
    if (!compute_mac(secret_, hs::accept_mac_input(h->hello, h->connect_msg), expected)) {
      fail(h, RAFT_NOCONNECTION, "refused a " + who + ": HMAC failed");
      return;
    }
    h->accept_msg = hs::encode_accept(hs::Accept{expected});
    h->step = Handshake::Step::kVerified;
    release_slot(h);  // finished but for our answer, which gets the whole handshake timeout
    arm_timer(h, timeout_ms_);
    if (write(h, 1, h->accept_msg.data(), h->accept_msg.size())) maybe_hand_off(h);
  }

  // --- outgoing ---

  static void on_resolved(uv_getaddrinfo_t* req, int status, addrinfo* res) {
    auto* h = static_cast<Handshake*>(req->data);
    Transport* me = h->transport;
    h->resolving = false;
    if (h->failed) {
      if (res != nullptr) uv_freeaddrinfo(res);
      me->maybe_destroy(h);
      return;
    }
    if (status != 0 || res == nullptr) {
      if (res != nullptr) uv_freeaddrinfo(res);
      me->fail(h, RAFT_NOCONNECTION, "cannot resolve " + h->peer_address + ": " + uv_error(status));
      return;
    }
    sockaddr_storage addr{};
    std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
    uv_freeaddrinfo(res);
    me->slots_.learn(source_key(reinterpret_cast<const sockaddr*>(&addr)));
    me->start_connect(h, reinterpret_cast<const sockaddr*>(&addr));
  }

  void start_connect(Handshake* h, const sockaddr* addr) {
    h->step = Handshake::Step::kConnecting;
    h->connect.data = h;
    const int rc = uv_tcp_connect(&h->connect, h->tcp, addr, &Transport::on_connected);
    if (rc != 0) fail(h, RAFT_NOCONNECTION, "");
  }

  static void on_connected(uv_connect_t* req, int status) {
    auto* h = static_cast<Handshake*>(req->data);
    Transport* me = h->transport;
    if (h->failed) return;  // canceled: the close callbacks finish the job
    if (status != 0) {
      // A peer that is down refuses connections: ordinary, raft retries. Not worth a log line.
      me->fail(h, RAFT_NOCONNECTION, "");
      return;
    }
    me->tune(h->tcp);
    h->step = Handshake::Step::kHello;
    me->read(h, h->hello.data(), h->hello.size());
  }

  void on_hello(Handshake* h) {
    const std::string who = "node " + std::to_string(h->peer_id) + " at " + h->peer_address;
    const std::variant<hs::Hello, hs::Refusal> hello = hs::decode_hello(h->hello);
    if (std::holds_alternative<hs::Refusal>(hello)) {
      fail(h, RAFT_NOCONNECTION, who + " does not speak the turnstile raft handshake");
      return;
    }
    const std::uint64_t their_id = std::get<hs::Hello>(hello).id;
    if (their_id != h->peer_id) {
      fail(h, RAFT_NOCONNECTION,
           "the raft address of " + who + " answers as node " + std::to_string(their_id) +
               " (check the raft addresses in the cluster's configuration)");
      return;
    }
    hs::Connect connect;
    connect.from = id_;
    connect.to = h->peer_id;
    connect.address = address_;
    if (RAND_bytes(connect.nonce.data(), static_cast<int>(connect.nonce.size())) != 1) {
      fail(h, RAFT_NOCONNECTION, "OpenSSL RAND_bytes failed: cannot run the raft handshake");
      return;
    }
    h->connect_msg = hs::encode_connect(connect);  // the MAC field is zeros until it is known
    if (!compute_mac(secret_, hs::connect_mac_input(h->hello, h->connect_msg), connect.mac)) {
      fail(h, RAFT_NOCONNECTION, "HMAC failed in the raft handshake with " + who);
      return;
    }
    h->connect_msg = hs::encode_connect(connect);
    h->step = Handshake::Step::kAccept;
    if (write(h, 0, h->connect_msg.data(), h->connect_msg.size())) {
      read(h, h->accept_msg.data(), h->accept_msg.size());
    }
  }

  void on_accept_message(Handshake* h) {
    hs::Mac expected{};
    const std::string who = "node " + std::to_string(h->peer_id) + " at " + h->peer_address;
    if (!compute_mac(secret_, hs::accept_mac_input(h->hello, h->connect_msg), expected)) {
      fail(h, RAFT_NOCONNECTION, "HMAC failed in the raft handshake with " + who);
      return;
    }
    const hs::Accept accept = std::get<hs::Accept>(hs::decode_accept(h->accept_msg));
    if (CRYPTO_memcmp(expected.data(), accept.mac.data(), hs::kMacSize) != 0) {
      fail(h, RAFT_NOCONNECTION,
           who + " failed authentication: it does not know the cluster secret");
      return;
    }
    h->step = Handshake::Step::kVerified;
    maybe_hand_off(h);
  }

  // --- both ---

  // Raft traffic is many small messages: no Nagle delay. Keepalive lets a dead peer's stream go
  // (raft never writes on the streams it accepted, so it would not notice otherwise).
  static void tune(uv_tcp_t* tcp) {
    uv_tcp_nodelay(tcp, 1);
    uv_tcp_keepalive(tcp, 1, 30);
  }

  // Reads exactly `n` bytes into `into`, then calls the step's handler.
  void read(Handshake* h, unsigned char* into, std::size_t n) {
    h->in = into;
    h->in_want = n;
    h->in_got = 0;
    const int rc = uv_read_start(reinterpret_cast<uv_stream_t*>(h->tcp), &Transport::on_alloc,
                                 &Transport::on_read);
    if (rc != 0) fail(h, RAFT_NOCONNECTION, "");
  }

  static void on_alloc(uv_handle_t* handle, std::size_t, uv_buf_t* buf) {
    auto* h = static_cast<Handshake*>(handle->data);
    // Never more than what is left of the message: raft's bytes stay in the socket.
    *buf = uv_buf_init(reinterpret_cast<char*>(h->in + h->in_got),
                       static_cast<unsigned int>(h->in_want - h->in_got));
  }

  static void on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t*) {
    auto* h = static_cast<Handshake*>(stream->data);
    Transport* me = h->transport;
    if (h->failed) return;
    if (nread == 0) return;
    if (nread < 0) {
      std::string why;
      if (h->outgoing && h->step == Handshake::Step::kAccept) {
        why = "node " + std::to_string(h->peer_id) + " at " + h->peer_address +
              " closed the connection during the handshake (a different cluster secret?)";
      } else if (!h->outgoing) {
        why = "a raft connection from " + h->peer_name + " ended during the handshake (" +
              uv_error(static_cast<int>(nread)) + ")";
      }
      me->fail(h, RAFT_NOCONNECTION, why);
      return;
    }
    h->in_got += static_cast<std::size_t>(nread);
    const bool opens_with_magic =
        h->step == Handshake::Step::kConnect || h->step == Handshake::Step::kHello;
    if (opens_with_magic && !hs::magic_so_far({h->in, h->in_got})) {
      // Junk: not worth waiting for the rest of a message it will never be.
      if (h->outgoing) {
        me->fail(h, RAFT_NOCONNECTION,
                 "node " + std::to_string(h->peer_id) + " at " + h->peer_address +
                     " does not speak the turnstile raft handshake");
      } else {
        me->fail(
            h, RAFT_NOCONNECTION,
            "refused a raft connection from " + h->peer_name + ": not a turnstile raft handshake");
      }
      return;
    }
    if (h->in_got < h->in_want) return;
    uv_read_stop(stream);
    switch (h->step) {
      case Handshake::Step::kConnect:
        me->on_connect_message(h);
        break;
      case Handshake::Step::kHello:
        me->on_hello(h);
        break;
      case Handshake::Step::kAccept:
        me->on_accept_message(h);
        break;
      default:
        me->fail(h, RAFT_NOCONNECTION, "");
        break;
    }
  }

  // Writes from a buffer the handshake owns; false if it failed at once (h is failing).
  bool write(Handshake* h, std::size_t slot, unsigned char* data, std::size_t len) {
    uv_buf_t buf = uv_buf_init(reinterpret_cast<char*>(data), static_cast<unsigned int>(len));
    h->writes[slot].data = h;
    const int rc = uv_write(&h->writes[slot], reinterpret_cast<uv_stream_t*>(h->tcp), &buf, 1,
                            &Transport::on_written);
    if (rc != 0) {
      fail(h, RAFT_NOCONNECTION, "");
      return false;
    }
    ++h->writes_in_flight;
    return true;
  }

  static void on_written(uv_write_t* req, int status) {
    auto* h = static_cast<Handshake*>(req->data);
    --h->writes_in_flight;
    if (h->failed) return;
    if (status != 0) {
      h->transport->fail(h, RAFT_NOCONNECTION, "");
      return;
    }
    h->transport->maybe_hand_off(h);
  }

  // Verified and every write of ours out: the stream is raft's.
  void maybe_hand_off(Handshake* h) {
    if (h->failed || h->step != Handshake::Step::kVerified || h->writes_in_flight > 0) return;
    if (closing_) {
      fail(h, RAFT_CANCELED, "");
      return;
    }
    release_slot(h);
    uv_tcp_t* tcp = h->tcp;
    h->handed_off = true;
    h->tcp = nullptr;
    --h->open_handles;
    uv_close(reinterpret_cast<uv_handle_t*>(&h->timer), &Transport::on_timer_closed);
    if (h->outgoing) {
      h->cb(h->req, reinterpret_cast<uv_stream_t*>(tcp), 0);
    } else {
      accept_cb_(&iface_, h->peer_id, h->peer_address.c_str(), reinterpret_cast<uv_stream_t*>(tcp));
    }
  }

  static void on_timeout(uv_timer_t* timer) {
    auto* h = static_cast<Handshake*>(timer->data);
    Transport* me = h->transport;
    std::string who = h->outgoing ? "node " + std::to_string(h->peer_id) + " at " + h->peer_address
                                  : "a raft connection from " + h->peer_name;
    // A peer that is simply down is raft's ordinary retry, not news.
    const bool news = !h->outgoing || h->step != Handshake::Step::kConnecting;
    me->fail(h, RAFT_NOCONNECTION,
             news ? "the raft handshake with " + who + " did not complete within " +
                        std::to_string(h->timer_ms) + " ms"
                  : "");
  }

  // Closes everything of the handshake; raft's connect callback (outgoing) runs once the handles
  // are closed.
  void fail(Handshake* h, int status, const std::string& why) {
    if (h->failed || h->handed_off) return;
    h->failed = true;
    h->status = status;
    release_slot(h);
    if (!why.empty()) {
      log_limited((h->outgoing ? "out:" + h->peer_address : "in:" + h->peer_name) + ":" + why, why);
    }
    if (h->resolving) uv_cancel(reinterpret_cast<uv_req_t*>(&h->resolve));
    uv_close(reinterpret_cast<uv_handle_t*>(h->tcp), &Transport::on_tcp_closed);
    uv_close(reinterpret_cast<uv_handle_t*>(&h->timer), &Transport::on_timer_closed);
  }

  static void on_tcp_closed(uv_handle_t* handle) {
    auto* h = static_cast<Handshake*>(handle->data);
    raft_free(handle);
    h->tcp = nullptr;
    --h->open_handles;
    h->transport->maybe_destroy(h);
  }

  static void on_timer_closed(uv_handle_t* handle) {
    auto* h = static_cast<Handshake*>(handle->data);
    --h->open_handles;
    h->transport->maybe_destroy(h);
  }

  void maybe_destroy(Handshake* h) {
    if (h->open_handles > 0 || h->resolving || h->writes_in_flight > 0) return;
    if (h->outgoing && !h->handed_off) h->cb(h->req, nullptr, h->status);
    handshakes_.erase(h);
    maybe_closed();
  }

  // Handshake failures repeat (raft reconnects every connect_retry_ms): one line per peer and
  // reason per kLogRepeatMs.
  void log_limited(const std::string& key, const std::string& line) {
    const std::uint64_t now = uv_now(loop_);
    auto [it, fresh] = logged_.try_emplace(key, now);
    if (!fresh) {
      if (now - it->second < kLogRepeatMs) return;
      it->second = now;
    }
    if (logged_.size() > 1024) logged_.clear();
    log_(line);
  }

  uv_loop_t* loop_;
  const std::string secret_;
  const std::string bind_address_;
  const unsigned timeout_ms_;
  LogFn log_;
  raft_uv_transport iface_{};
  raft_id id_ = 0;
  std::string address_;
  uv_tcp_t listener_{};
  bool listener_open_ = false;
  raft_uv_accept_cb accept_cb_ = nullptr;
  bool closing_ = false;
  raft_uv_transport_close_cb close_cb_ = nullptr;
  std::unordered_map<Handshake*, std::unique_ptr<Handshake>> handshakes_;
  core::HandshakeSlots slots_;
  std::unordered_map<core::HandshakeSlot, Handshake*> by_slot_;  // incoming, holding a slot
  std::string listen_error_;
  std::unordered_map<std::string, std::uint64_t> logged_;
};

}  // namespace

class RaftTransport::Impl : public Transport {
 public:
  using Transport::Transport;
};

RaftTransport::RaftTransport(uv_loop_t* loop, std::string secret, std::string bind_address,
                             unsigned timeout_ms, LogFn log)
    : impl_(std::make_unique<Impl>(loop, std::move(secret), std::move(bind_address), timeout_ms,
                                   std::move(log))) {}

RaftTransport::~RaftTransport() = default;

raft_uv_transport* RaftTransport::raft() { return impl_->raft(); }

const std::string& RaftTransport::listen_error() const { return impl_->listen_error(); }

void RaftTransport::close_unused() { impl_->close_unused(); }

void RaftTransport::learn_peers(const std::vector<std::string>& configured) {
  impl_->learn_peers(configured);
}

}  // namespace turnstile::net
