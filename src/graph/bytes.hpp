// The bytes of a task's result (graph.hpp): written once by the rank that computed it, read back on
// every rank in the same order. Each result type is serialized in exactly one place, its Codec: the
// generic ones here (trivially copyable values, strings, vectors, Eigen matrices, pairs, tuples, arrays,
// and a struct that names its fields once), and for a library type that cannot name them, a Codec
// specialization (compress/stages/codecs.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <Eigen/Core>

namespace latentllm::graph {

class Bytes;

// Codec<T>::put(Bytes&, const T&) and Codec<T>::get(Bytes&, T&); the generic ones below.
template <typename T, typename Enable = void>
struct Codec;

class Bytes {
 public:
  Bytes() = default;
  explicit Bytes(std::vector<char> data) : data_(std::move(data)) {}

  template <typename T>
  void put(const T& v) { Codec<T>::put(*this, v); }
  template <typename T>
  void get(T& v) { Codec<T>::get(*this, v); }
  template <typename T>
  T get() {
    T v{};
    get(v);
    return v;
  }

  void put_raw(const void* p, std::size_t n) {
    if (n == 0) return;
    const std::size_t at = data_.size();
    data_.resize(at + n);
    std::memcpy(data_.data() + at, p, n);
  }
  // The next n bytes into dst (which may be null when n is 0: an empty vector's or matrix's data()).
  void get_raw(void* dst, std::size_t n);

  std::vector<char>& data() { return data_; }
  const std::vector<char>& data() const { return data_; }
  // Every byte read back (a codec that reads fewer than were written is a defect).
  bool consumed() const { return at_ == data_.size(); }

 private:
  std::vector<char> data_;
  std::size_t at_ = 0;
};

template <typename T>
struct Codec<T, std::enable_if_t<std::is_trivially_copyable_v<T> && !std::is_empty_v<T>>> {
  static void put(Bytes& b, const T& v) { b.put_raw(&v, sizeof v); }
  static void get(Bytes& b, T& v) { b.get_raw(&v, sizeof v); }
};

// A struct that names its fields once, `template <class S> static auto fields(S& s) { return
// std::tie(s.a, s.b); }`, travels as those fields in order.
template <typename T>
concept HasFields = requires(T& t) { T::fields(t); };

template <typename T>
struct Codec<T, std::enable_if_t<HasFields<T> && !std::is_trivially_copyable_v<T>>> {
  static void put(Bytes& b, const T& v) {
    std::apply([&](const auto&... x) { (b.put(x), ...); }, T::fields(v));
  }
  static void get(Bytes& b, T& v) {
    std::apply([&](auto&... x) { (b.get(x), ...); }, T::fields(v));
  }
};

template <>
struct Codec<std::string> {
  static void put(Bytes& b, const std::string& s) {
    b.put<std::uint64_t>(s.size());
    b.put_raw(s.data(), s.size());
  }
  static void get(Bytes& b, std::string& s) {
    s.resize(b.get<std::uint64_t>());
    b.get_raw(s.data(), s.size());
  }
};

template <typename T>
struct Codec<std::vector<T>> {
  static void put(Bytes& b, const std::vector<T>& v) {
    b.put<std::uint64_t>(v.size());
    if constexpr (std::is_trivially_copyable_v<T>) {
      b.put_raw(v.data(), v.size() * sizeof(T));
    } else {
      for (const T& x : v) b.put(x);
    }
  }
  static void get(Bytes& b, std::vector<T>& v) {
    v.resize(b.get<std::uint64_t>());
    if constexpr (std::is_trivially_copyable_v<T>) {
      b.get_raw(v.data(), v.size() * sizeof(T));
    } else {
      for (T& x : v) b.get(x);
    }
  }
};

template <typename T, int R, int C, int O, int MR, int MC>
struct Codec<Eigen::Matrix<T, R, C, O, MR, MC>> {
  using M = Eigen::Matrix<T, R, C, O, MR, MC>;
  static void put(Bytes& b, const M& m) {
    b.put<std::int64_t>(m.rows());
    b.put<std::int64_t>(m.cols());
    b.put_raw(m.data(), static_cast<std::size_t>(m.size()) * sizeof(T));
  }
  static void get(Bytes& b, M& m) {
    const auto rows = b.get<std::int64_t>(), cols = b.get<std::int64_t>();
    m.resize(rows, cols);
    b.get_raw(m.data(), static_cast<std::size_t>(m.size()) * sizeof(T));
  }
};

template <typename A, typename B>
struct Codec<std::pair<A, B>, std::enable_if_t<!std::is_trivially_copyable_v<std::pair<A, B>>>> {
  static void put(Bytes& b, const std::pair<A, B>& v) { b.put(v.first), b.put(v.second); }
  static void get(Bytes& b, std::pair<A, B>& v) { b.get(v.first), b.get(v.second); }
};

template <typename... T>
struct Codec<std::tuple<T...>, std::enable_if_t<!std::is_trivially_copyable_v<std::tuple<T...>>>> {
  static void put(Bytes& b, const std::tuple<T...>& v) { std::apply([&](const auto&... x) { (b.put(x), ...); }, v); }
  static void get(Bytes& b, std::tuple<T...>& v) { std::apply([&](auto&... x) { (b.get(x), ...); }, v); }
};

template <typename T, std::size_t N>
struct Codec<std::array<T, N>, std::enable_if_t<!std::is_trivially_copyable_v<std::array<T, N>>>> {
  static void put(Bytes& b, const std::array<T, N>& v) {
    for (const T& x : v) b.put(x);
  }
  static void get(Bytes& b, std::array<T, N>& v) {
    for (T& x : v) b.get(x);
  }
};

}  // namespace latentllm::graph
