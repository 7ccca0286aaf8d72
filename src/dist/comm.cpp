#include "dist/comm.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "latentllm/error.hpp"

#ifdef LATENTLLM_WITH_MPI
// The C API only: mpi.h would otherwise pull in the deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace latentllm::dist {
namespace {

int g_rank = 0;
int g_size = 1;
[[maybe_unused]] bool g_mpi = false;  // MPI_Init ran (launched by an MPI launcher)
Traffic g_traffic;

// The message of a rank the launcher stops, prebuilt (a signal handler may only write()): two buffers,
// the one being rewritten never the one the handler reads.
char g_stop_message[2][512] = {};
std::atomic<int> g_stop_current{0};
std::string g_activity = "startup";  // what the message names, and what it advises
std::string g_stop_advice;

[[maybe_unused]] void on_terminate(int) {
  const char* m = g_stop_message[g_stop_current.load()];
  if (m[0] != '\0') {
    ssize_t ignored = ::write(2, m, std::strlen(m));
    (void)ignored;
  }
  ::_exit(1);
}

#ifdef LATENTLLM_WITH_MPI
// Large buffers go in pieces: MPI counts are ints.
constexpr std::int64_t kPieceBytes = std::int64_t{1} << 28;

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw IoError(fmt::format("MPI {} on {}: {}", what, rank_label(), std::string(msg, static_cast<std::size_t>(len))));
}

void add_int128(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint64_t*>(in);
  auto* b = static_cast<std::uint64_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const unsigned __int128 x = (static_cast<unsigned __int128>(a[2 * i + 1]) << 64) | a[2 * i];
    const unsigned __int128 y = (static_cast<unsigned __int128>(b[2 * i + 1]) << 64) | b[2 * i];
    const unsigned __int128 s = x + y;  // two's complement: wraps exactly like the signed sum
    b[2 * i] = static_cast<std::uint64_t>(s);
    b[2 * i + 1] = static_cast<std::uint64_t>(s >> 64);
  }
}

struct Timed {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  explicit Timed(std::int64_t bytes) { g_traffic.bytes += bytes; }
  ~Timed() { g_traffic.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
};

// A broadcast of at most this many bytes (a size, a flag) waits without spinning (wait_quietly).
constexpr std::int64_t kQuietBytes = 4096;

// Waits for a request while leaving the core to others: a rank waiting for another's decomposition
// would otherwise spin in MPI's progress loop for seconds on the core the other needs. Tests, then
// sleeps between tests, growing from 50 µs to 2 ms (the latency it adds to a wait of seconds).
void wait_quietly(MPI_Request& req, const char* what) {
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    int done = 0;
    check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    std::this_thread::sleep_for(nap);
    nap = std::min(2 * nap, std::chrono::microseconds(2000));
  }
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

std::vector<int> row_counts(std::int64_t rows) {
  std::vector<int> counts(static_cast<std::size_t>(g_size));
  const int mine = static_cast<int>(rows);
  check(MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD), "allgather");
  return counts;
}

// The concatenation in rank order of every rank's rows; on every rank (root < 0) or on root only.
void collect_rows(const float* mine, std::int64_t rows, std::int64_t width, MatrixF& all, int root) {
  const std::vector<int> counts = row_counts(rows);
  std::vector<int> displs(counts.size(), 0);
  std::int64_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    displs[r] = static_cast<int>(total);
    total += counts[r];
  }
  if (root < 0 || g_rank == root) all.resize(total, width);
  MPI_Datatype row;
  check(MPI_Type_contiguous(static_cast<int>(width), MPI_FLOAT, &row), "type");
  MPI_Type_commit(&row);
  const Timed t(4 * width * total);
  const int rc = root < 0 ? MPI_Allgatherv(mine, static_cast<int>(rows), row, all.data(), counts.data(), displs.data(),
                                           row, MPI_COMM_WORLD)
                          : MPI_Gatherv(mine, static_cast<int>(rows), row, g_rank == root ? all.data() : nullptr,
                                        counts.data(), displs.data(), row, root, MPI_COMM_WORLD);
  MPI_Type_free(&row);
  check(rc, "gather");
}

// redistribute_rows under K > 1 ranks: every rank's (rows, want) known to all, then one Alltoallv of
// whole rows. The rows a rank sends to q are the ones it holds of q's wanted range; they arrive in rank
// order, which is the sequence's order, so `out` needs no reordering.
void exchange_rows(const float* mine, std::int64_t rows, std::int64_t width, std::int64_t stride, Share want,
                   MatrixF& out) {
  const auto k = static_cast<std::size_t>(g_size);
  std::vector<std::int64_t> info(3 * k);  // per rank: rows held, want.begin, want.end
  const std::int64_t me[3] = {rows, want.begin, want.end};
  check(MPI_Allgather(me, 3, MPI_INT64_T, info.data(), 3, MPI_INT64_T, MPI_COMM_WORLD), "allgather");
  std::vector<std::int64_t> first(k + 1, 0);  // the sequence's index of each rank's first row
  for (std::size_t r = 0; r < k; ++r) first[r + 1] = first[r] + info[3 * r];
  // The wanted indices i (rows i·stride) of [b, e) whose rows rank p holds: [lo, hi).
  const auto held = [&](std::size_t p, std::int64_t b, std::int64_t e) {
    const std::int64_t lo = std::max(b, (first[p] + stride - 1) / stride);
    const std::int64_t hi = std::min(e, (first[p + 1] + stride - 1) / stride);
    return Share{lo, std::max(lo, hi)};
  };
  std::vector<int> scounts(k), sdispls(k), rcounts(k), rdispls(k);
  const auto self = static_cast<std::size_t>(g_rank);
  std::int64_t sent = 0, got = 0;
  for (std::size_t q = 0; q < k; ++q) {
    const Share s = held(self, info[3 * q + 1], info[3 * q + 2]);
    scounts[q] = static_cast<int>(s.size());
    sdispls[q] = static_cast<int>(sent);
    sent += s.size();
    const Share r = held(q, want.begin, want.end);
    rcounts[q] = static_cast<int>(r.size());
    rdispls[q] = static_cast<int>(got);
    got += r.size();
  }
  if (got != want.size()) {
    throw Error(fmt::format("redistribute rows on {}: rows {}..{} with stride {} (expected below {})", rank_label(),
                            want.begin, want.end, stride, first[k]));
  }
  MatrixF packed(sent, width);  // [sent, width] the rows for each rank in rank order
  for (std::size_t q = 0, row = 0; q < k; ++q) {
    const Share s = held(self, info[3 * q + 1], info[3 * q + 2]);
    for (std::int64_t i = s.begin; i < s.end; ++i, ++row) {
      packed.row(static_cast<Eigen::Index>(row)) =
          Eigen::Map<const Eigen::RowVectorXf>(mine + (i * stride - first[self]) * width, width);
    }
  }
  MPI_Datatype row;
  check(MPI_Type_contiguous(static_cast<int>(width), MPI_FLOAT, &row), "type");
  MPI_Type_commit(&row);
  const Timed t(4 * width * (sent - scounts[self]));
  const int rc = MPI_Alltoallv(packed.data(), scounts.data(), sdispls.data(), row, out.data(), rcounts.data(),
                               rdispls.data(), row, MPI_COMM_WORLD);
  MPI_Type_free(&row);
  check(rc, "alltoallv");
}
#endif

}  // namespace

bool built_with_mpi() {
#ifdef LATENTLLM_WITH_MPI
  return true;
#else
  return false;
#endif
}

void init(int* argc, char*** argv) {
#ifdef LATENTLLM_WITH_MPI
  if (!launched_by_mpi()) return;
  int provided = 0;
  // Only the main thread calls MPI; the thread pool's workers never do.
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) return;
  g_mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  // Errors come back as codes (check() turns them into exceptions) instead of aborting inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (g_size > 1) {
    set_activity("startup");
    std::signal(SIGTERM, on_terminate);  // the launcher ends the other ranks when one fails or dies
  }
#else
  (void)argc, (void)argv;
#endif
}

void finalize() {
#ifdef LATENTLLM_WITH_MPI
  if (g_mpi) MPI_Finalize();
  g_mpi = false;
#endif
}

void abort_all(int code) {
#ifdef LATENTLLM_WITH_MPI
  if (g_mpi && g_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

void set_activity(const std::string& what) {
  if (g_size == 1) return;
  g_activity = what;
  const int next = 1 - g_stop_current.load();
  const std::string m = fmt::format("latentllm: error: {}: stopped by the MPI launcher during {} (another rank failed "
                                    "or was killed{}{})\n", rank_label(), what, g_stop_advice.empty() ? "" : "; ",
                                    g_stop_advice);
  std::snprintf(g_stop_message[next], sizeof g_stop_message[next], "%s", m.c_str());
  g_stop_current.store(next);
}

void set_stop_advice(const std::string& advice) {
  g_stop_advice = advice;
  set_activity(g_activity);
}

int rank() { return g_rank; }
int size() { return g_size; }
std::string rank_label() { return g_size > 1 ? fmt::format("rank {} of {}", g_rank, g_size) : std::string(); }
Traffic traffic() { return g_traffic; }

Share share_of(std::int64_t n, int r, int k) {
  return {n * r / k, n * (r + 1) / k};
}

#ifdef LATENTLLM_WITH_MPI
namespace {
// Runs piece(p, count, pair, op) on words in pieces of kPieceBytes, with the 128-bit pair type and the
// exact addition (add_int128) made around them; stops at the first failing return code, which it
// returns (MPI_SUCCESS when all succeed).
template <typename Piece>
int over_int128_pieces(std::span<std::uint64_t> words, Piece piece) {
  MPI_Datatype pair;
  check(MPI_Type_contiguous(2, MPI_UINT64_T, &pair), "type");
  MPI_Type_commit(&pair);
  MPI_Op op;
  MPI_Op_create(&add_int128, /*commute=*/1, &op);
  const Timed t(static_cast<std::int64_t>(words.size_bytes()));
  int rc = MPI_SUCCESS;
  const std::int64_t per = kPieceBytes / 16;
  const auto n = static_cast<std::int64_t>(words.size() / 2);
  for (std::int64_t i = 0; i < n && rc == MPI_SUCCESS; i += per) {
    rc = piece(words.data() + 2 * i, static_cast<int>(std::min(per, n - i)), pair, op);
  }
  MPI_Op_free(&op);
  MPI_Type_free(&pair);
  return rc;
}
}  // namespace
#endif

void sum_int128(std::span<std::uint64_t> words) {
#ifdef LATENTLLM_WITH_MPI
  if (g_size == 1) return;
  check(over_int128_pieces(words,
                           [](std::uint64_t* p, int count, MPI_Datatype pair, MPI_Op op) {
                             return MPI_Allreduce(MPI_IN_PLACE, p, count, pair, op, MPI_COMM_WORLD);
                           }),
        "allreduce");
#else
  (void)words;
#endif
}

void reduce_int128(std::span<std::uint64_t> words, int root) {
#ifdef LATENTLLM_WITH_MPI
  if (g_size == 1) return;
  const bool at_root = g_rank == root;
  check(over_int128_pieces(words,
                           [&](std::uint64_t* p, int count, MPI_Datatype pair, MPI_Op op) {
                             return MPI_Reduce(at_root ? MPI_IN_PLACE : p, at_root ? p : nullptr, count, pair, op,
                                               root, MPI_COMM_WORLD);
                           }),
        "reduce");
#else
  (void)words, (void)root;
#endif
}

void sum_int64(std::span<std::int64_t> values) {
#ifdef LATENTLLM_WITH_MPI
  if (g_size == 1) return;
  const Timed t(static_cast<std::int64_t>(values.size_bytes()));
  check(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_INT64_T, MPI_SUM,
                      MPI_COMM_WORLD), "allreduce");
#else
  (void)values;
#endif
}

std::int64_t sum_of(std::int64_t mine) {
  sum_int64(std::span<std::int64_t>(&mine, 1));
  return mine;
}

void redistribute_rows(const float* mine, std::int64_t rows, std::int64_t width, std::int64_t stride, Share want,
                       MatrixF& out) {
  out.resize(want.size(), width);
#ifdef LATENTLLM_WITH_MPI
  if (g_size > 1) return exchange_rows(mine, rows, width, stride, want, out);
#endif
  if (want.begin < 0 || (want.size() > 0 && (want.end - 1) * stride >= rows)) {
    throw Error(fmt::format("redistribute rows: rows {}..{} with stride {} (expected below {})", want.begin, want.end,
                            stride, rows));
  }
  for (std::int64_t i = want.begin; i < want.end; ++i)
    out.row(i - want.begin) = Eigen::Map<const Eigen::RowVectorXf>(mine + i * stride * width, width);
}

void gather_rows(const float* mine, std::int64_t rows, std::int64_t width, MatrixF& all) {
#ifdef LATENTLLM_WITH_MPI
  if (g_size > 1) return collect_rows(mine, rows, width, all, 0);
#endif
  all = Eigen::Map<const MatrixF>(mine, rows, width);
}

std::vector<double> gather_doubles(std::span<const double> mine) {
#ifdef LATENTLLM_WITH_MPI
  if (g_size > 1) {
    std::vector<int> counts(static_cast<std::size_t>(g_size));
    const int n = static_cast<int>(mine.size());
    check(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "gather");
    std::vector<int> displs(counts.size(), 0);
    int total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) displs[r] = total, total += counts[r];
    std::vector<double> all(g_rank == 0 ? static_cast<std::size_t>(total) : 0);
    const Timed t(8 * total);
    check(MPI_Gatherv(mine.data(), n, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE, 0,
                      MPI_COMM_WORLD), "gather");
    return all;
  }
#endif
  return {mine.begin(), mine.end()};
}

std::vector<std::string> all_gather_bytes(std::string_view mine) {
#ifdef LATENTLLM_WITH_MPI
  if (g_size > 1) {
    if (mine.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw Error(fmt::format("all-gather on {}: {} bytes (expected at most {})", rank_label(), mine.size(),
                              std::numeric_limits<int>::max()));
    }
    std::vector<int> counts(static_cast<std::size_t>(g_size));
    const int n = static_cast<int>(mine.size());
    check(MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD), "allgather");
    std::vector<int> displs(counts.size(), 0);
    std::int64_t total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      displs[r] = static_cast<int>(total);
      total += counts[r];
    }
    if (total > std::numeric_limits<int>::max()) {
      throw Error(fmt::format("all-gather on {}: {} bytes from all ranks (expected at most {})", rank_label(), total,
                              std::numeric_limits<int>::max()));
    }
    std::string all(static_cast<std::size_t>(total), '\0');
    const Timed t(total);
    check(MPI_Allgatherv(mine.data(), n, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE,
                         MPI_COMM_WORLD), "allgather");
    std::vector<std::string> out;
    for (std::size_t r = 0; r < counts.size(); ++r)
      out.push_back(all.substr(static_cast<std::size_t>(displs[r]), static_cast<std::size_t>(counts[r])));
    return out;
  }
#endif
  return {std::string(mine)};
}

void broadcast_bytes(void* data, std::int64_t bytes, int root) {
#ifdef LATENTLLM_WITH_MPI
  if (g_size == 1) return;
  if (bytes <= kQuietBytes) {
    // The wait is for root's work, not for the network: not counted as communication time.
    g_traffic.bytes += bytes;
    MPI_Request req;
    check(MPI_Ibcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD, &req), "broadcast");
    return wait_quietly(req, "broadcast");
  }
  // Every rank here first, waiting quietly: root's small broadcast before this one completes without
  // the others, and root would otherwise spin in MPI_Bcast, the time counted as communication, while a
  // receiver still computes its own jobs of the round.
  barrier();
  const Timed t(bytes);
  auto* p = static_cast<char*>(data);
  for (std::int64_t i = 0; i < bytes; i += kPieceBytes) {
    check(MPI_Bcast(p + i, static_cast<int>(std::min(kPieceBytes, bytes - i)), MPI_BYTE, root, MPI_COMM_WORLD),
          "broadcast");
  }
#else
  (void)data, (void)bytes, (void)root;
#endif
}

void broadcast_doubles(std::vector<double>& values, int root) {
  if (g_size == 1) return;
  auto n = static_cast<std::int64_t>(values.size());
  broadcast_bytes(&n, sizeof n, root);
  values.resize(static_cast<std::size_t>(n));
  broadcast_bytes(values.data(), 8 * n, root);
}

std::vector<int> owners_by_cost(std::span<const double> costs, int k) {
  std::vector<double> load(static_cast<std::size_t>(std::max(k, 1)), 0.0);
  std::vector<int> owners;
  owners.reserve(costs.size());
  for (const double c : costs) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of equal loads
    *least += c;
    owners.push_back(static_cast<int>(least - load.begin()));
  }
  return owners;
}

void barrier() {
#ifdef LATENTLLM_WITH_MPI
  if (g_size == 1) return;
  MPI_Request req;
  check(MPI_Ibarrier(MPI_COMM_WORLD, &req), "barrier");
  wait_quietly(req, "barrier");
#endif
}

}  // namespace latentllm::dist
