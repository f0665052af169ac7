// A minimal intrusive doubly linked list: nodes carry their own links, so one node (a holder, a
// waiter) can sit in two lists at once (its resource's and its session's) and leave either in
// O(1) without a search or an allocation. The list does not own its nodes.
//
// Thread affinity: owned by one engine.
#pragma once

#include <cstddef>

#include "core/assert.h"

namespace turnstile::core {

template <typename T>
struct ListLink {
  T* prev = nullptr;
  T* next = nullptr;
  bool linked = false;
};

template <typename T, ListLink<T> T::*kLink>
class IntrusiveList {
 public:
  IntrusiveList() = default;
  IntrusiveList(const IntrusiveList&) = delete;
  IntrusiveList& operator=(const IntrusiveList&) = delete;

  bool empty() const { return head_ == nullptr; }
  std::size_t size() const { return size_; }
  T* front() const { return head_; }
  static T* next(const T* node) { return (node->*kLink).next; }

  void push_back(T* node) {
    ListLink<T>& link = node->*kLink;
    TS_ASSERT(!link.linked);
    link.linked = true;
    link.prev = tail_;
    link.next = nullptr;
    if (tail_ != nullptr) {
      (tail_->*kLink).next = node;
    } else {
      head_ = node;
    }
    tail_ = node;
    ++size_;
  }

  void remove(T* node) {
    ListLink<T>& link = node->*kLink;
    TS_ASSERT(link.linked);
    if (link.prev != nullptr) {
      (link.prev->*kLink).next = link.next;
    } else {
      head_ = link.next;
    }
    if (link.next != nullptr) {
      (link.next->*kLink).prev = link.prev;
    } else {
      tail_ = link.prev;
    }
    link = ListLink<T>{};
    --size_;
  }

 private:
  T* head_ = nullptr;
  T* tail_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace turnstile::core
