// The collectives of a run over K ranks (include/latentllm/dist.hpp): the one place that knows about
// MPI. Every other folder combines per-rank partial results through these calls, which every rank must
// make in the same order; with one rank each is a copy or nothing.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "latentllm/dist.hpp"
#include "latentllm/tensor.hpp"

namespace latentllm::dist {

// A rank's contiguous share [begin, end) of n items (calibration batches, evaluation batches): rank r
// of K holds items [⌊n·r/K⌋, ⌊n·(r+1)/K⌋). Fixed by n, r and K alone, never by timing.
struct Share {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};
Share share_of(std::int64_t n, int r, int k);
inline Share my_share(std::int64_t n) { return share_of(n, rank(), size()); }

// In place, on every rank: the sum over the ranks of 128-bit two's complement integers stored as
// (low, high) word pairs. Integer addition is associative, so the sum is the same bits whatever order
// the network reduces in.
void sum_int128(std::span<std::uint64_t> words);
// In place, on root only (the others' words are left unspecified): the same sum as sum_int128, with
// half its traffic, for what only root needs.
void reduce_int128(std::span<std::uint64_t> words, int root);
// In place, on every rank: the sum over the ranks (exact).
void sum_int64(std::span<std::int64_t> values);
// On every rank: the sum over the ranks (exact).
std::int64_t sum_of(std::int64_t mine);
// Rows of one sequence spread over the ranks: every rank's rows [n_r, width] (row-major) one after
// another in rank order. On every rank, out [want.size(), width] = the sequence's rows i·stride for
// i in [want.begin, want.end) (`want` differs per rank), sent by the ranks that hold them (each row
// travels once, to the rank that wants it; no rank holds the whole sequence).
void redistribute_rows(const float* mine, std::int64_t rows, std::int64_t width, std::int64_t stride, Share want,
                       MatrixF& out);
// On rank 0 (`all`, untouched elsewhere): every rank's rows one after another in rank order.
void gather_rows(const float* mine, std::int64_t rows, std::int64_t width, MatrixF& all);
// On rank 0: every rank's values one after another in rank order.
std::vector<double> gather_doubles(std::span<const double> mine);
// On every rank: every rank's bytes (any length, 0 included), one string per rank in rank order.
std::vector<std::string> all_gather_bytes(std::string_view mine);
// root's bytes to every rank. A small broadcast (at most 4 KiB: a size, a flag) waits for root
// without spinning, so that a rank waiting for another's work leaves the core to it (send the size
// of a large result first).
void broadcast_bytes(void* data, std::int64_t bytes, int root);
// root's values to every rank (resized there to root's size).
void broadcast_doubles(std::vector<double>& values, int root);

// The owner rank of each of n independent pieces of work of the given modelled costs, among k ranks:
// in item order, each to the rank with the least cost so far (the lowest such rank). Fixed by the costs
// and k alone, so every rank computes the same owners; with k = 1 all are rank 0.
std::vector<int> owners_by_cost(std::span<const double> costs, int k);
// Every rank waits (without spinning) for the others.
void barrier();

}  // namespace latentllm::dist
