#include "net/raft_acked_record.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/assert.h"
#include "net/raft_commit_rule.h"

namespace turnstile::net {

namespace {

using core::LogPosition;

// What the wrapper replaced.
struct Original {
  int (*load)(raft_io*, raft_term*, raft_id*, raft_snapshot**, raft_index*, raft_entry**,
              std::size_t*) = nullptr;
  int (*append)(raft_io*, raft_io_append*, const raft_entry[], unsigned,
                raft_io_append_cb) = nullptr;
  int (*truncate)(raft_io*, raft_index) = nullptr;
  int (*snapshot_put)(raft_io*, unsigned, raft_io_snapshot_put*, const raft_snapshot*,
                      raft_io_snapshot_put_cb) = nullptr;
  void (*close)(raft_io*, raft_io_close_cb) = nullptr;
  int (*bootstrap)(raft_io*, const raft_configuration*) = nullptr;
};

// A request raft made that waits behind a lowering of the record, in raft's order.
struct HeldRequest {
  enum class Kind { kAppend, kTruncate, kSnapshotPut };
  Kind kind = Kind::kAppend;
  raft_io_append* append = nullptr;
  const raft_entry* entries = nullptr;
  unsigned n = 0;
  raft_io_append_cb append_cb = nullptr;
  raft_index truncate_at = 0;
  unsigned trailing = 0;
  raft_io_snapshot_put* put = nullptr;
  const raft_snapshot* snapshot = nullptr;
  raft_io_snapshot_put_cb put_cb = nullptr;
};

// A completion raft has not heard of yet: it goes to raft once `ticket` is durable (0: at once),
// after every completion before it.
struct Completion {
  std::function<void(int status)> forward;
  int status = 0;
  std::uint64_t ticket = 0;
};

struct IssuedAppend {
  raft_io_append_cb cb = nullptr;
  LogPosition last;
};

struct IssuedPut {
  raft_io_snapshot_put_cb cb = nullptr;
  LogPosition last;
  bool replaces_log = false;
};

struct Node {
  raft* r = nullptr;
  Original original;
  core::AckedIndex* index = nullptr;
  AckedStore* store = nullptr;
  raft_index next_index = 1;  // the index of the next entry appended
  std::unordered_map<raft_io_append*, IssuedAppend> appends;
  std::unordered_map<raft_io_snapshot_put*, IssuedPut> puts;
  std::deque<Completion> completions;
  std::deque<HeldRequest> held;
  std::uint64_t hold_ticket = 0;  // held requests wait for it; 0: only for their turn
  bool pumping = false;
  bool closing = false;  // raft closes its I/O: nothing more is reported stored
};

std::mutex nodes_mutex;
std::unordered_map<const raft_io*, std::unique_ptr<Node>>& nodes() {
  static std::unordered_map<const raft_io*, std::unique_ptr<Node>> table;
  return table;
}
// Completions carry only the request: which node issued it.
std::unordered_map<const void*, Node*>& requests() {
  static std::unordered_map<const void*, Node*> table;
  return table;
}

std::atomic<std::uint64_t> waits{0};

Node& node_of(const raft_io* io) {
  std::lock_guard lock(nodes_mutex);
  return *nodes().at(io);
}

void remember(const void* request, Node* node) {
  std::lock_guard lock(nodes_mutex);
  requests()[request] = node;
}

Node* forget(const void* request) {
  std::lock_guard lock(nodes_mutex);
  auto it = requests().find(request);
  TS_ASSERT(it != requests().end());
  Node* node = it->second;
  requests().erase(it);
  return node;
}

// The newest position the record holds or is about to hold.
std::uint64_t recorded_index(const Node& node) {
  return std::max(node.index->durable().index, node.index->wanted().index);
}

// The term of entry `index` as raft holds it (0 when it holds none there).
std::uint64_t term_of(const raft* r, raft_index index) {
  if (index == 0) return 0;
  if (index == r->log.snapshot.last_index) return r->log.snapshot.last_term;
  return term_in_log(r, index).value_or(0);
}

void pump(Node& node);

void on_appended(raft_io_append* request, int status) {
  Node* node = forget(request);
  auto it = node->appends.find(request);
  TS_ASSERT(it != node->appends.end());
  const IssuedAppend append = it->second;
  node->appends.erase(it);
  if (node->closing && status == 0) status = RAFT_CANCELED;
  const std::uint64_t ticket = status == 0 ? node->index->want(append.last) : 0;
  if (ticket != 0) waits.fetch_add(1, std::memory_order_relaxed);
  node->completions.push_back(
      {[request, cb = append.cb](int result) { cb(request, result); }, status, ticket});
  pump(*node);
}

void on_put(raft_io_snapshot_put* request, int status) {
  Node* node = forget(request);
  auto it = node->puts.find(request);
  TS_ASSERT(it != node->puts.end());
  const IssuedPut put = it->second;
  node->puts.erase(it);
  if (node->closing && status == 0 && put.replaces_log) status = RAFT_CANCELED;
  const std::uint64_t ticket = status == 0 && put.replaces_log ? node->index->want(put.last) : 0;
  node->completions.push_back(
      {[request, cb = put.cb](int result) { cb(request, result); }, status, ticket});
  pump(*node);
}

// `direct`: raft asked for it just now (not held back).
int issue_append(Node& node, const HeldRequest& held, bool direct) {
  const raft_index first = node.next_index;
  const LogPosition last{first + held.n - 1, held.entries[held.n - 1].term};
  // raft appends entries to its in-memory log before it asks for them to be stored: the position
  // kept here and raft's own agree.
  TS_ASSERT(direct ? last.index == raft_last_index(node.r) : last.index <= raft_last_index(node.r));
  node.appends[held.append] = IssuedAppend{held.append_cb, last};
  node.next_index = last.index + 1;
  remember(held.append, &node);
  const int rv = node.original.append(node.r->io, held.append, held.entries, held.n, &on_appended);
  if (rv != 0) {
    forget(held.append);
    node.appends.erase(held.append);
    node.next_index = first;
  }
  return rv;
}

// Whether `held` may go to raft's own I/O now; if the record must come down first, asks for that
// and says no.
bool ready_to_issue(Node& node, const HeldRequest& held) {
  std::optional<LogPosition> lowered;
  if (held.kind == HeldRequest::Kind::kTruncate && recorded_index(node) >= held.truncate_at) {
    const raft_index kept = held.truncate_at - 1;
    lowered = LogPosition{kept, term_of(node.r, kept)};
  } else if (held.kind == HeldRequest::Kind::kSnapshotPut && held.trailing == 0 &&
             recorded_index(node) > held.snapshot->index) {
    lowered = LogPosition{held.snapshot->index, held.snapshot->term};
  }
  if (!lowered) return true;
  node.hold_ticket = node.index->want(*lowered);
  return false;
}

// Hands `held` to raft's own I/O. A request raft was told was taken but that fails now gets its
// failure through its callback.
void issue(Node& node, const HeldRequest& held) {
  raft_io* io = node.r->io;
  switch (held.kind) {
    case HeldRequest::Kind::kAppend:
      if (const int rv = issue_append(node, held, false); rv != 0) {
        node.completions.push_back(
            {[request = held.append, cb = held.append_cb](int result) { cb(request, result); }, rv,
             0});
      }
      return;
    case HeldRequest::Kind::kTruncate: {
      // Appends issued before the cut cannot make the record claim what the cut removes.
      for (auto& [request, append] : node.appends) {
        append.last.index = std::min<std::uint64_t>(append.last.index, held.truncate_at - 1);
      }
      node.next_index = held.truncate_at;
      if (const int rv = node.original.truncate(io, held.truncate_at); rv != 0) {
        std::fprintf(stderr, "raft: truncating the log at %llu failed (%d)\n",
                     static_cast<unsigned long long>(held.truncate_at), rv);
      }
      return;
    }
    case HeldRequest::Kind::kSnapshotPut: {
      const bool replaces_log = held.trailing == 0;
      const LogPosition last{held.snapshot->index, held.snapshot->term};
      node.puts[held.put] = IssuedPut{held.put_cb, last, replaces_log};
      if (replaces_log) node.next_index = last.index + 1;
      remember(held.put, &node);
      const int rv =
          node.original.snapshot_put(io, held.trailing, held.put, held.snapshot, &on_put);
      if (rv != 0) {
        forget(held.put);
        node.puts.erase(held.put);
        node.completions.push_back(
            {[request = held.put, cb = held.put_cb](int result) { cb(request, result); }, rv, 0});
      }
      return;
    }
  }
}

// One round: completions whose record is durable go to raft, held requests whose lowering is
// durable go to the disk, and the next write of the record starts. True if anything moved.
bool pump_once(Node& node) {
  bool moved = false;
  while (!node.completions.empty() && node.index->is_durable(node.completions.front().ticket)) {
    Completion completion = std::move(node.completions.front());
    node.completions.pop_front();
    completion.forward(completion.status);  // raft may ask for more I/O from here
    moved = true;
  }
  while (!node.held.empty() &&
         (node.hold_ticket == 0 || node.index->is_durable(node.hold_ticket))) {
    node.hold_ticket = 0;
    if (!ready_to_issue(node, node.held.front())) break;
    const HeldRequest held = node.held.front();
    node.held.pop_front();
    issue(node, held);
    moved = true;
  }
  if (std::optional<core::SlotWrite> write = node.index->begin_write()) {
    Node* self = &node;
    node.store->write(*write, [self](bool ok) {
      self->index->end_write(ok);
      pump(*self);
    });
    moved = true;
  }
  return moved;
}

void pump(Node& node) {
  if (node.pumping) return;  // the outer call goes round again
  node.pumping = true;
  while (pump_once(node)) {
  }
  node.pumping = false;
}

// Requests go through in raft's order: once one is held, every later one is held behind it.
int hold_or_issue(Node& node, const HeldRequest& held) {
  if (node.held.empty() && node.hold_ticket == 0 && ready_to_issue(node, held)) {
    if (held.kind == HeldRequest::Kind::kAppend) return issue_append(node, held, true);
    issue(node, held);
    pump(node);
    return 0;
  }
  node.held.push_back(held);
  pump(node);
  return 0;
}

int append(raft_io* io, raft_io_append* request, const raft_entry entries[], unsigned n,
           raft_io_append_cb cb) {
  HeldRequest held;
  held.kind = HeldRequest::Kind::kAppend;
  held.append = request;
  held.entries = entries;
  held.n = n;
  held.append_cb = cb;
  return hold_or_issue(node_of(io), held);
}

int truncate(raft_io* io, raft_index index) {
  HeldRequest held;
  held.kind = HeldRequest::Kind::kTruncate;
  held.truncate_at = index;
  return hold_or_issue(node_of(io), held);
}

int snapshot_put(raft_io* io, unsigned trailing, raft_io_snapshot_put* request,
                 const raft_snapshot* snapshot, raft_io_snapshot_put_cb cb) {
  HeldRequest held;
  held.kind = HeldRequest::Kind::kSnapshotPut;
  held.trailing = trailing;
  held.put = request;
  held.snapshot = snapshot;
  held.put_cb = cb;
  return hold_or_issue(node_of(io), held);
}

// raft closes its I/O: what waits for the record, or behind a lowering of it, is answered
// canceled (never stored, as far as raft knows), then raft's own I/O closes.
void close(raft_io* io, raft_io_close_cb cb) {
  Node& node = node_of(io);
  node.closing = true;
  for (const HeldRequest& held : node.held) {
    if (held.kind == HeldRequest::Kind::kAppend) {
      node.completions.push_back(
          {[request = held.append, cb = held.append_cb](int result) { cb(request, result); },
           RAFT_CANCELED, 0});
    } else if (held.kind == HeldRequest::Kind::kSnapshotPut) {
      node.completions.push_back(
          {[request = held.put, cb = held.put_cb](int result) { cb(request, result); },
           RAFT_CANCELED, 0});
    }
  }
  node.held.clear();
  node.hold_ticket = 0;
  for (Completion& completion : node.completions) {
    if (!node.index->is_durable(completion.ticket)) {
      completion.status = RAFT_CANCELED;
      completion.ticket = 0;
    }
  }
  pump(node);
  node.original.close(io, cb);
}

// What a failed load hands back is raft's to free no more: free it here, as raft would.
void free_loaded(raft_snapshot* snapshot, raft_entry* entries, std::size_t n) {
  if (snapshot != nullptr) {
    raft_configuration_close(&snapshot->configuration);
    for (unsigned i = 0; i < snapshot->n_bufs; ++i) raft_free(snapshot->bufs[i].base);
    raft_free(snapshot->bufs);
    raft_free(snapshot);
  }
  if (entries != nullptr) {
    void* batch = nullptr;
    for (std::size_t i = 0; i < n; ++i) {
      if (entries[i].batch != batch) {
        batch = entries[i].batch;
        raft_free(batch);
      }
    }
    raft_free(entries);
  }
}

int load(raft_io* io, raft_term* term, raft_id* voted_for, raft_snapshot** snapshot,
         raft_index* start_index, raft_entry** entries, std::size_t* n_entries) {
  Node& node = node_of(io);
  const int rv = node.original.load(io, term, voted_for, snapshot, start_index, entries, n_entries);
  if (rv != 0) return rv;
  LogPosition last;
  if (*snapshot != nullptr) last = LogPosition{(*snapshot)->index, (*snapshot)->term};
  if (*n_entries > 0 && *start_index + *n_entries - 1 > last.index) {
    last = LogPosition{*start_index + *n_entries - 1, (*entries)[*n_entries - 1].term};
  }
  if (const std::optional<std::string> why = core::forgotten_entries(last, node.index->durable())) {
    std::snprintf(io->errmsg, sizeof io->errmsg, "%s", why->c_str());
    free_loaded(*snapshot, *entries, *n_entries);
    *snapshot = nullptr;
    *entries = nullptr;
    *n_entries = 0;
    return RAFT_CORRUPT;
  }
  node.next_index = last.index + 1;
  return 0;
}

// raft_bootstrap writes the first configuration entry (index 1, term 1) straight to the disk, not
// through append. The node stands on it from then on (raft votes only as a member of a
// configuration), so the record takes it as acknowledged like any entry stored: a node that
// loses it refuses to start rather than run on as a member that can never vote.
int bootstrap(raft_io* io, const raft_configuration* configuration) {
  Node& node = node_of(io);
  const int rv = node.original.bootstrap(io, configuration);
  if (rv != 0) return rv;
  node.index->want(LogPosition{1, 1});
  pump(node);
  return 0;
}

}  // namespace

void install_acked_record(raft* r, core::AckedIndex* index, AckedStore* store) {
  std::lock_guard lock(nodes_mutex);
  raft_io* io = r->io;
  auto node = std::make_unique<Node>();
  if (io->append == &append) {
    // Installed already: a new raft instance on the same raft_io starts afresh.
    node->original = nodes().at(io)->original;
  } else {
    node->original =
        Original{io->load, io->append, io->truncate, io->snapshot_put, io->close, io->bootstrap};
  }
  node->r = r;
  node->index = index;
  node->store = store;
  // A raft_io at the address of a closed one replaces its entry.
  nodes()[io] = std::move(node);
  io->load = &load;
  io->append = &append;
  io->truncate = &truncate;
  io->snapshot_put = &snapshot_put;
  io->close = &close;
  io->bootstrap = &bootstrap;
}

std::uint64_t acked_record_waits() { return waits.load(std::memory_order_relaxed); }

}  // namespace turnstile::net
