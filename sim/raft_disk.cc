#include "sim/raft_disk.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "core/assert.h"
#include "core/slot_record.h"
#include "sim/prng.h"

namespace turnstile::sim {

namespace {

std::mutex disks_mutex;
std::unordered_map<const raft_io*, RaftDisk*>& disks() {
  static std::unordered_map<const raft_io*, RaftDisk*> table;
  return table;
}

// A message raft handed to the stub, until the stub reports it sent.
struct Send {
  RaftDisk* disk = nullptr;
  std::uint64_t life = 0;
  raft_io_send_cb cb = nullptr;
};
std::unordered_map<const raft_io_send*, Send>& sends() {
  static std::unordered_map<const raft_io_send*, Send> table;
  return table;
}

// What the stub would have freed on delivery: the message's buffers.
void drop_message(raft_message* message) {
  if (message->type == RAFT_IO_APPEND_ENTRIES && message->append_entries.entries != nullptr) {
    raft_free(message->append_entries.entries[0].batch);
    raft_free(message->append_entries.entries);
  } else if (message->type == RAFT_IO_INSTALL_SNAPSHOT) {
    raft_configuration_close(&message->install_snapshot.conf);
    raft_free(message->install_snapshot.data.base);
  }
}

}  // namespace

RaftDisk::RaftDisk(unsigned latency_ms, std::uint64_t seed)
    : latency_ms_(latency_ms), tear_draws_(seed) {}

RaftDisk::~RaftDisk() {
  if (io_ == nullptr) return;
  std::lock_guard lock(disks_mutex);
  disks().erase(io_);
}

void RaftDisk::install(raft_io* io) {
  io_ = io;
  {
    std::lock_guard lock(disks_mutex);
    disks()[io] = this;
  }
  stub_close_ = io->close;
  stub_start_ = io->start;
  stub_send_ = io->send;
  io->load = &load;
  io->bootstrap = &bootstrap;
  io->set_term = &set_term;
  io->set_vote = &set_vote;
  io->append = &append;
  io->truncate = &truncate;
  io->snapshot_put = &snapshot_put;
  io->snapshot_get = &snapshot_get;
  io->close = &close;
  io->start = &start;
  io->send = &send;
}

RaftDisk& RaftDisk::of(raft_io* io) {
  std::lock_guard lock(disks_mutex);
  return *disks().at(io);
}

// ---- the queue --------------------------------------------------------------------------------

void RaftDisk::queue(std::function<void()> finish, std::function<void()> cancel) {
  const raft_time due = std::max<raft_time>(io_->time(io_) + latency_ms_, last_due_);
  last_due_ = due;
  pending_.push_back({due, std::move(finish), std::move(cancel)});
}

void RaftDisk::finish_due(raft_time now) {
  bool moved = true;
  while (moved && !down_) {
    moved = false;
    if (!pending_.empty() && pending_.front().due <= now) {
      Pending request = std::move(pending_.front());
      pending_.pop_front();
      request.finish();  // raft may queue more from here
      moved = true;
    }
    if (record_write_ && record_write_->due <= now) {
      RecordWrite done = std::move(*record_write_);
      record_write_.reset();
      const core::SlotWrite& w = done.write;
      if (record_.size() < w.offset + w.size) record_.resize(w.offset + w.size, 0);
      std::memcpy(record_.data() + w.offset, w.bytes.data(), w.size);
      done.done(true);  // the wrapper may start the next write from here
      moved = true;
    }
  }
}

void RaftDisk::crash() {
  down_ = true;
  crashed_ = true;
  if (record_write_) {
    // The record write in flight: lost, or a prefix of it reached the file. A file is created
    // whole or not at all (turnstiled writes a new one beside it and renames it), so a torn first
    // write leaves no file.
    Prng dice(tear_draws_++, 0x7ea2);
    const core::SlotWrite& w = record_write_->write;
    if (!w.creates_file && dice.chance(500)) {
      const std::size_t kept = static_cast<std::size_t>(dice.below(w.size));
      std::memcpy(record_.data() + w.offset, w.bytes.data(), kept);
    }
    record_write_.reset();  // its callback is the dead process's: never called
  }
  // The log's requests in flight stay queued: raft_close answers them canceled (close()).
}

void RaftDisk::write(const core::SlotWrite& write, std::function<void(bool ok)> done) {
  if (down_) return;  // a closing process: nothing reaches the disk any more
  TS_ASSERT(!record_write_);
  record_write_ = RecordWrite{io_->time(io_) + latency_ms_, write, std::move(done)};
}

// ---- damage and state -------------------------------------------------------------------------

raft_index RaftDisk::last_index() const {
  if (!entries_.empty()) return first_ + entries_.size() - 1;
  return snapshot_ ? snapshot_->index : 0;
}

std::optional<raft_index> RaftDisk::snapshot_index() const {
  if (!snapshot_) return std::nullopt;
  return snapshot_->index;
}

core::LogPosition RaftDisk::recorded() const {
  const core::SlotRecovery recovery = core::recover_slots(core::kAckedFormat, record_);
  if (recovery.outcome != core::SlotRecovery::Outcome::kRecovered) return {};
  return {recovery.record.values[0], recovery.record.values[1]};
}

bool RaftDisk::lose_from(raft_index index) {
  if (entries_.empty() || index < first_ || index > last_index()) return false;
  entries_.resize(index - first_);
  return true;
}

bool RaftDisk::cut_snapshot() {
  if (!snapshot_ || snapshot_->cut) return false;
  snapshot_->data.resize(snapshot_->data.size() / 2);
  snapshot_->cut = true;
  return true;
}

void RaftDisk::store_snapshot(const raft_snapshot& snapshot, unsigned trailing) {
  Snapshot copy;
  copy.index = snapshot.index;
  copy.term = snapshot.term;
  copy.configuration_index = snapshot.configuration_index;
  for (unsigned i = 0; i < snapshot.configuration.n; ++i) {
    const raft_server& server = snapshot.configuration.servers[i];
    copy.configuration.push_back({server.id, server.address, server.role});
  }
  for (unsigned i = 0; i < snapshot.n_bufs; ++i) {
    copy.data.append(static_cast<const char*>(snapshot.bufs[i].base), snapshot.bufs[i].len);
  }
  snapshot_ = std::move(copy);
  if (trailing == 0) {
    // A leader's snapshot replaces the whole log.
    entries_.clear();
    first_ = snapshot.index + 1;
    return;
  }
  // A snapshot of its own: the entries more than `trailing` behind it go.
  while (!entries_.empty() && first_ + trailing <= snapshot.index) {
    entries_.pop_front();
    ++first_;
  }
  if (entries_.empty()) first_ = std::max(first_, snapshot.index + 1);
}

raft_snapshot* RaftDisk::copy_snapshot() const {
  auto* snapshot = static_cast<raft_snapshot*>(raft_calloc(1, sizeof(raft_snapshot)));
  TS_ASSERT(snapshot != nullptr);
  snapshot->index = snapshot_->index;
  snapshot->term = snapshot_->term;
  snapshot->configuration_index = snapshot_->configuration_index;
  raft_configuration_init(&snapshot->configuration);
  for (const Server& server : snapshot_->configuration) {
    TS_ASSERT(raft_configuration_add(&snapshot->configuration, server.id, server.address.c_str(),
                                     server.role) == 0);
  }
  snapshot->bufs = static_cast<raft_buffer*>(raft_malloc(sizeof(raft_buffer)));
  TS_ASSERT(snapshot->bufs != nullptr);
  snapshot->n_bufs = 1;
  snapshot->bufs[0].len = snapshot_->data.size();
  snapshot->bufs[0].base = raft_malloc(std::max<std::size_t>(1, snapshot_->data.size()));
  TS_ASSERT(snapshot->bufs[0].base != nullptr);
  std::memcpy(snapshot->bufs[0].base, snapshot_->data.data(), snapshot_->data.size());
  return snapshot;
}

// ---- raft_io ----------------------------------------------------------------------------------

int RaftDisk::load(raft_io* io, raft_term* term, raft_id* voted_for, raft_snapshot** snapshot,
                   raft_index* start_index, raft_entry** entries, std::size_t* n_entries) {
  RaftDisk& disk = of(io);
  *snapshot = nullptr;
  *entries = nullptr;
  *n_entries = 0;
  if (disk.snapshot_ && disk.snapshot_->cut) {
    // turnstiled's directory check reads every snapshot whole before libraft does.
    std::snprintf(io->errmsg, sizeof io->errmsg,
                  "snapshot-%llu-%llu is cut short: its checksum does not match",
                  static_cast<unsigned long long>(disk.snapshot_->term),
                  static_cast<unsigned long long>(disk.snapshot_->index));
    return RAFT_CORRUPT;
  }
  *term = disk.term_;
  *voted_for = disk.vote_;
  if (disk.snapshot_) *snapshot = disk.copy_snapshot();
  *start_index = disk.first_;
  if (disk.entries_.empty()) {
    *start_index = disk.snapshot_ ? disk.snapshot_->index + 1 : 1;
    return 0;
  }
  std::size_t bytes = 0;
  for (const Entry& entry : disk.entries_) bytes += entry.data.size();
  auto* array = static_cast<raft_entry*>(raft_calloc(disk.entries_.size(), sizeof(raft_entry)));
  auto* batch = static_cast<char*>(raft_malloc(std::max<std::size_t>(1, bytes)));
  TS_ASSERT(array != nullptr && batch != nullptr);
  char* cursor = batch;
  for (std::size_t i = 0; i < disk.entries_.size(); ++i) {
    const Entry& entry = disk.entries_[i];
    std::memcpy(cursor, entry.data.data(), entry.data.size());
    array[i].term = entry.term;
    array[i].type = entry.type;
    array[i].buf.base = cursor;
    array[i].buf.len = entry.data.size();
    array[i].batch = batch;
    cursor += entry.data.size();
  }
  *entries = array;
  *n_entries = disk.entries_.size();
  return 0;
}

int RaftDisk::bootstrap(raft_io* io, const raft_configuration* configuration) {
  RaftDisk& disk = of(io);
  if (disk.term_ != 0 || !disk.entries_.empty() || disk.snapshot_) return RAFT_CANTBOOTSTRAP;
  raft_buffer buffer;
  if (const int rv = raft_configuration_encode(configuration, &buffer); rv != 0) return rv;
  disk.entries_.push_back(
      {1, RAFT_CHANGE, std::string(static_cast<const char*>(buffer.base), buffer.len)});
  raft_free(buffer.base);
  disk.first_ = 1;
  disk.term_ = 1;
  disk.vote_ = 0;
  return 0;
}

int RaftDisk::set_term(raft_io* io, raft_term term) {
  RaftDisk& disk = of(io);
  disk.term_ = term;
  disk.vote_ = 0;
  return 0;
}

int RaftDisk::set_vote(raft_io* io, raft_id id) {
  of(io).vote_ = id;
  return 0;
}

int RaftDisk::append(raft_io* io, raft_io_append* request, const raft_entry entries[], unsigned n,
                     raft_io_append_cb cb) {
  RaftDisk& disk = of(io);
  std::vector<Entry> copies;
  copies.reserve(n);
  for (unsigned i = 0; i < n; ++i) {
    copies.push_back(
        {entries[i].term, entries[i].type,
         std::string(static_cast<const char*>(entries[i].buf.base), entries[i].buf.len)});
  }
  disk.queue(
      [&disk, request, cb, copies = std::move(copies)]() mutable {
        for (Entry& entry : copies) disk.entries_.push_back(std::move(entry));
        if (cb != nullptr) cb(request, 0);
      },
      [request, cb] {
        if (cb != nullptr) cb(request, RAFT_CANCELED);
      });
  return 0;
}

int RaftDisk::truncate(raft_io* io, raft_index index) {
  RaftDisk& disk = of(io);
  disk.queue(
      [&disk, index] {
        if (index < disk.first_) {
          disk.entries_.clear();
          disk.first_ = index;
        } else if (index - disk.first_ < disk.entries_.size()) {
          disk.entries_.resize(index - disk.first_);
        }
      },
      {});
  return 0;
}

int RaftDisk::snapshot_put(raft_io* io, unsigned trailing, raft_io_snapshot_put* request,
                           const raft_snapshot* snapshot, raft_io_snapshot_put_cb cb) {
  RaftDisk& disk = of(io);
  // raft keeps the snapshot until the callback.
  disk.queue(
      [&disk, trailing, request, snapshot, cb] {
        disk.store_snapshot(*snapshot, trailing);
        if (cb != nullptr) cb(request, 0);
      },
      [request, cb] {
        if (cb != nullptr) cb(request, RAFT_CANCELED);
      });
  return 0;
}

int RaftDisk::snapshot_get(raft_io* io, raft_io_snapshot_get* request, raft_io_snapshot_get_cb cb) {
  RaftDisk& disk = of(io);
  disk.queue([&disk, request, cb] { cb(request, disk.copy_snapshot(), 0); },
             [request, cb] { cb(request, nullptr, RAFT_CANCELED); });
  return 0;
}

// raft_close: what never reached the disk is answered canceled, then the stub closes (it drops
// the messages in flight; it holds no entries of its own).
void RaftDisk::close(raft_io* io, raft_io_close_cb cb) {
  RaftDisk& disk = of(io);
  disk.down_ = true;
  std::deque<Pending> pending = std::move(disk.pending_);
  disk.pending_.clear();
  for (Pending& request : pending) {
    if (request.cancel) request.cancel();
  }
  disk.record_write_.reset();
  disk.tick_ = nullptr;
  disk.recv_ = nullptr;
  disk.last_due_ = 0;
  ++disk.life_;
  if (disk.crashed_) {
    // The stub lives on under the next raft instance: what it has in flight stays in flight.
    disk.crashed_ = false;
    if (cb != nullptr) cb(io);
    return;
  }
  disk.stub_close_(io, cb);
}

int RaftDisk::send(raft_io* io, raft_io_send* request, const raft_message* message,
                   raft_io_send_cb cb) {
  RaftDisk& disk = of(io);
  {
    std::lock_guard lock(disks_mutex);
    sends()[request] = Send{&disk, disk.life_, cb};
  }
  const int rv = disk.stub_send_(io, request, message, &on_sent);
  if (rv != 0) {
    std::lock_guard lock(disks_mutex);
    sends().erase(request);
  }
  return rv;
}

// A send of a closed instance is never answered: its request is lost with the process.
void RaftDisk::on_sent(raft_io_send* request, int status) {
  Send sent;
  {
    std::lock_guard lock(disks_mutex);
    auto it = sends().find(request);
    TS_ASSERT(it != sends().end());
    sent = it->second;
    sends().erase(it);
  }
  if (sent.life == sent.disk->life_ && sent.cb != nullptr) sent.cb(request, status);
}

int RaftDisk::start(raft_io* io, unsigned msecs, raft_io_tick_cb tick, raft_io_recv_cb recv) {
  RaftDisk& disk = of(io);
  disk.tick_ = tick;
  disk.recv_ = recv;
  return disk.stub_start_(io, msecs, &on_tick, &on_recv);
}

void RaftDisk::on_tick(raft_io* io) {
  RaftDisk& disk = of(io);
  if (!disk.down_ && disk.tick_ != nullptr) disk.tick_(io);
}

void RaftDisk::on_recv(raft_io* io, raft_message* message) {
  RaftDisk& disk = of(io);
  if (disk.down_ || disk.recv_ == nullptr) {
    drop_message(message);
    return;
  }
  disk.recv_(io, message);
}

}  // namespace turnstile::sim
