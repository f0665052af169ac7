// RaftDisk: the disk of one node of the simulated cluster (sim/raft_cluster.h), kept apart from
// its raft instance, so that a node can crash, lose what it had not stored yet, and start again
// from what its disk holds, as turnstiled does after kill -9.
//
// It replaces the disk methods of the fixture's in-memory raft_io (load, bootstrap, set_term,
// set_vote, append, truncate, snapshot_put, snapshot_get, close) and gates its tick, receive and
// send callbacks: the fixture keeps ticking a node that is down, and a message sent before a
// crash may still be in flight, but nothing reaches a closed raft instance. What raft asks of the
// disk completes in raft's order, each request `latency` ms of fixture time after the one before it
// (finish_due(), from the fixture's step hook). It also holds the node's acknowledged-index record
// file (core/acked_index.h) and is the AckedStore that net/raft_acked_record.h writes it through,
// the same wrapper turnstiled installs on its libuv disk.
//
// A crash loses every request in flight (a record write in flight may be torn: a prefix of its
// bytes reaches the file). While the node is down its disk can be damaged as turnstiled's can:
//
//   lose_from(i)   the entries from index i on are gone: a flipped byte or a cut in the batch
//                  that holds entry i, after which libraft's loader keeps only what came before;
//   cut_snapshot() the newest snapshot is cut short: its checksum no longer matches, and the
//                  load fails as turnstiled's directory check fails (docs/cluster.md).
//
// Thread affinity: single-threaded, as the fixture.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/acked_index.h"
#include "net/raft_acked_record.h"

extern "C" {
#include <raft.h>
}

namespace turnstile::sim {

class RaftDisk final : public net::AckedStore {
 public:
  RaftDisk(unsigned latency_ms, std::uint64_t seed);
  ~RaftDisk() override;
  RaftDisk(const RaftDisk&) = delete;
  RaftDisk& operator=(const RaftDisk&) = delete;

  // Takes over `io`'s disk, before raft_bootstrap. `io` outlives this disk's use of it.
  void install(raft_io* io);

  // Completes the requests due by fixture time `now`, in order (raft may ask for more from here).
  void finish_due(raft_time now);

  // The process died: requests in flight are lost (their callbacks, which raft_close asks for,
  // answer canceled), a record write in flight may leave a torn prefix, and the tick and receive
  // callbacks stop until restarting().
  void crash();
  // A crashed node starts again (before raft_start, which loads what the disk holds).
  void restarting() { down_ = false; }

  // The damage a crashed node's disk can take. Each returns whether there was anything to damage.
  bool lose_from(raft_index index);
  bool cut_snapshot();

  // What the disk holds.
  raft_index first_index() const { return first_; }  // of the first stored entry
  raft_index last_index() const;  // of the last entry, or the snapshot's when none follows
  std::optional<raft_index> snapshot_index() const;
  const std::vector<std::uint8_t>& record_file() const { return record_; }
  // The position the record file holds (what recovery would take), {0, 0} when it holds none.
  core::LogPosition recorded() const;

  // net::AckedStore
  void write(const core::SlotWrite& write, std::function<void(bool ok)> done) override;

 private:
  struct Entry {
    raft_term term = 0;
    unsigned short type = RAFT_COMMAND;
    std::string data;
  };
  struct Server {
    raft_id id = 0;
    std::string address;
    int role = RAFT_VOTER;
  };
  struct Snapshot {
    raft_index index = 0;
    raft_term term = 0;
    std::vector<Server> configuration;
    raft_index configuration_index = 0;
    std::string data;
    bool cut = false;
  };
  // One request raft made, to be finished at `due`.
  struct Pending {
    raft_time due = 0;
    std::function<void()> finish;  // its effect on the disk, then raft's callback
    std::function<void()> cancel;  // raft's callback with RAFT_CANCELED (empty: none)
  };
  void queue(std::function<void()> finish, std::function<void()> cancel);
  void store_snapshot(const raft_snapshot& snapshot, unsigned trailing);
  raft_snapshot* copy_snapshot() const;

  static RaftDisk& of(raft_io* io);
  static int load(raft_io* io, raft_term* term, raft_id* voted_for, raft_snapshot** snapshot,
                  raft_index* start_index, raft_entry** entries, std::size_t* n_entries);
  static int bootstrap(raft_io* io, const raft_configuration* configuration);
  static int set_term(raft_io* io, raft_term term);
  static int set_vote(raft_io* io, raft_id id);
  static int append(raft_io* io, raft_io_append* request, const raft_entry entries[], unsigned n,
                    raft_io_append_cb cb);
  static int truncate(raft_io* io, raft_index index);
  static int snapshot_put(raft_io* io, unsigned trailing, raft_io_snapshot_put* request,
                          const raft_snapshot* snapshot, raft_io_snapshot_put_cb cb);
  static int snapshot_get(raft_io* io, raft_io_snapshot_get* request, raft_io_snapshot_get_cb cb);
  static void close(raft_io* io, raft_io_close_cb cb);
  static int start(raft_io* io, unsigned msecs, raft_io_tick_cb tick, raft_io_recv_cb recv);
  static int send(raft_io* io, raft_io_send* request, const raft_message* message,
                  raft_io_send_cb cb);
  static void on_sent(raft_io_send* request, int status);
  static void on_tick(raft_io* io);
  static void on_recv(raft_io* io, raft_message* message);

  unsigned latency_ms_;
  std::uint64_t tear_draws_;  // what a torn record write keeps, from the seed
  raft_io* io_ = nullptr;
  void (*stub_close_)(raft_io*, raft_io_close_cb) = nullptr;
  int (*stub_start_)(raft_io*, unsigned, raft_io_tick_cb, raft_io_recv_cb) = nullptr;
  int (*stub_send_)(raft_io*, raft_io_send*, const raft_message*, raft_io_send_cb) = nullptr;
  std::uint64_t life_ = 0;          // raft instances closed on this disk
  raft_io_tick_cb tick_ = nullptr;  // raft's, while it runs
  raft_io_recv_cb recv_ = nullptr;
  bool down_ = false;
  bool crashed_ = false;  // down by crash(): the next close leaves the stub running

  raft_term term_ = 0;
  raft_id vote_ = 0;
  std::optional<Snapshot> snapshot_;
  raft_index first_ = 1;  // the index of entries_.front() (or of the next entry)
  std::deque<Entry> entries_;
  std::vector<std::uint8_t> record_;  // the acknowledged-index file

  raft_time now_ = 0;
  raft_time last_due_ = 0;
  std::deque<Pending> pending_;
  struct RecordWrite {
    raft_time due = 0;
    core::SlotWrite write;
    std::function<void(bool)> done;
  };
  std::optional<RecordWrite> record_write_;
};

}  // namespace turnstile::sim
