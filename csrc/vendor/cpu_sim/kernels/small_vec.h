// A vector of trivially copyable values whose first N live inside it: a tensor's sizes and
// strides (a few dimensions) are copied into every kernel call and every queued work, and a heap
// allocation for each copy was most of a small op's cost in the kernel library.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <type_traits>
#include <vector>

namespace devx::cpu_sim::kern {

template <typename T, size_t N>
class SmallVec {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVec copies its values as bytes");

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;

  SmallVec() = default;
  SmallVec(std::initializer_list<T> values) { assign(values.begin(), values.end()); }
  SmallVec(size_t n, const T& value) { assign(n, value); }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  SmallVec(It first, It last) {
    assign(first, last);
  }
  // Implicit both ways: code outside the hot paths keeps working with std::vector.
  SmallVec(const std::vector<T>& v) { assign(v.begin(), v.end()); }  // NOLINT
  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }  // NOLINT

  SmallVec(const SmallVec& other) { *this = other; }
  SmallVec(SmallVec&& other) noexcept { take_from(other); }
  SmallVec& operator=(const SmallVec& other) {
    if (this == &other) return *this;
    if (other.size_ <= N) {
      // The whole inline buffer, a copy of fixed size: tensors are copied into every queued
      // work. (A heap buffer holds more than N, so N values can be read from either.)
      release();
      std::memcpy(inline_, other.data_, sizeof inline_);
      size_ = other.size_;
      return *this;
    }
    assign(other.begin(), other.end());
    return *this;
  }
  SmallVec& operator=(SmallVec&& other) noexcept {
    if (this != &other) {
      release();
      take_from(other);
    }
    return *this;
  }
  ~SmallVec() { release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  void clear() { size_ = 0; }
  void reserve(size_t n) { grow(n); }
  void resize(size_t n, const T& value = T()) {
    grow(n);
    for (size_t i = size_; i < n; ++i) data_[i] = value;
    size_ = n;
  }
  void push_back(const T& value) {
    if (size_ == capacity_) {
      const T copy = value;  // `value` may live in the buffer that grows
      grow(capacity_ * 2);
      data_[size_++] = copy;
      return;
    }
    data_[size_++] = value;
  }
  void pop_back() { --size_; }
  void assign(size_t n, const T& value) {
    const T copy = value;
    size_ = 0;
    resize(n, copy);
  }
  template <typename It, typename = typename std::iterator_traits<It>::iterator_category>
  void assign(It first, It last) {
    const size_t n = static_cast<size_t>(std::distance(first, last));
    size_ = 0;
    grow(n);
    std::copy(first, last, data_);
    size_ = n;
  }
  T* insert(const T* pos, size_t count, const T& value) {
    const size_t at = static_cast<size_t>(pos - data_);
    const T copy = value;
    grow(size_ + count);
    std::memmove(data_ + at + count, data_ + at, (size_ - at) * sizeof(T));
    std::fill(data_ + at, data_ + at + count, copy);
    size_ += count;
    return data_ + at;
  }
  T* insert(const T* pos, const T& value) { return insert(pos, 1, value); }
  T* erase(const T* pos) {
    const size_t at = static_cast<size_t>(pos - data_);
    std::memmove(data_ + at, data_ + at + 1, (size_ - at - 1) * sizeof(T));
    --size_;
    return data_ + at;
  }

  friend bool operator==(const SmallVec& a, const SmallVec& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const SmallVec& a, const SmallVec& b) { return !(a == b); }

 private:
  void grow(size_t n) {
    if (n <= capacity_) return;
    const size_t capacity = std::max(n, capacity_ * 2);
    T* fresh = new T[capacity];
    std::memcpy(fresh, data_, size_ * sizeof(T));
    release();
    data_ = fresh;
    capacity_ = capacity;
  }
  void release() {
    if (data_ != inline_) delete[] data_;
    data_ = inline_;
    capacity_ = N;
  }
  void take_from(SmallVec& other) {
    if (other.data_ == other.inline_) {
      std::memcpy(inline_, other.inline_, other.size_ * sizeof(T));
      data_ = inline_;
      capacity_ = N;
    } else {
      data_ = other.data_;
      capacity_ = other.capacity_;
      other.data_ = other.inline_;
      other.capacity_ = N;
    }
    size_ = other.size_;
    other.size_ = 0;
  }

  T* data_ = inline_;
  size_t size_ = 0;
  size_t capacity_ = N;
  T inline_[N];  // not value-initialised: a SmallVec<float, 256> is a row buffer on the stack
};

}  // namespace devx::cpu_sim::kern
