// A FIFO on one growable array that keeps its capacity: a queue pushed and
// popped on every op (a transport's posted frames, the replay log's index)
// allocates nothing once it has grown to the deepest it ever got (std::deque
// frees and allocates a block every few elements).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace rcoll {

// Capacity is a power of two (positions wrap with a mask).
template <typename T>
class RingQueue {
 public:
  RingQueue() = default;
  RingQueue(RingQueue&& o) noexcept { swap(o); }
  RingQueue& operator=(RingQueue&& o) noexcept {
    RingQueue gone;
    gone.swap(o);
    swap(gone);
    return *this;
  }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() { return slots_[head_]; }
  // The i-th element from the front.
  T& operator[](size_t i) { return slots_[(head_ + i) & (slots_.size() - 1)]; }

  void push_back(T value) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = std::move(value);
    ++size_;
  }

  void pop_front() {
    slots_[head_] = T{};
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
  }

  void swap(RingQueue& o) noexcept {
    slots_.swap(o.slots_);
    std::swap(head_, o.head_);
    std::swap(size_, o.size_);
  }

 private:
  void grow() {
    std::vector<T> bigger(slots_.empty() ? 8 : 2 * slots_.size());
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    slots_.swap(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace rcoll
