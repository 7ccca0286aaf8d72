// The collectives on one process (a plain run is one rank; tests/mpi/run.sh checks them under mpirun):
// shares cover the items in contiguous blocks independent of timing, and redistribute_rows hands back
// exactly the strided rows asked for, all_gather_bytes a rank's own bytes.
#include <gtest/gtest.h>

#include "dist/comm.hpp"
#include "latentllm/error.hpp"

namespace latentllm::dist {
namespace {

TEST(Share, BlocksCoverTheItemsInRankOrder) {
  for (const std::int64_t n : {0, 1, 4, 7, 100}) {
    for (int k = 1; k <= 5; ++k) {
      std::int64_t next = 0;
      for (int r = 0; r < k; ++r) {
        const Share s = share_of(n, r, k);
        EXPECT_EQ(s.begin, next) << n << " items, rank " << r << " of " << k;
        EXPECT_GE(s.size(), n / k);
        EXPECT_LE(s.size(), (n + k - 1) / k);
        next = s.end;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(RedistributeRows, OneRankGetsTheStridedRowsItAsks) {
  ASSERT_EQ(size(), 1);
  MatrixF x(10, 3);  // [10, 3] row t = (t, 10 + t, 20 + t)
  for (Eigen::Index t = 0; t < 10; ++t) x.row(t) << t, 10 + t, 20 + t;
  MatrixF out;
  redistribute_rows(x.data(), x.rows(), x.cols(), 3, {1, 4}, out);  // rows 3, 6, 9
  ASSERT_EQ(out.rows(), 3);
  for (Eigen::Index i = 0; i < 3; ++i) EXPECT_EQ(out.row(i), x.row(3 * (i + 1))) << i;
  redistribute_rows(x.data(), x.rows(), x.cols(), 1, {2, 2}, out);
  EXPECT_EQ(out.rows(), 0);
  EXPECT_THROW(redistribute_rows(x.data(), x.rows(), x.cols(), 3, {2, 5}, out), Error);  // row 12 of 10
  EXPECT_EQ(sum_of(7), 7);
}

TEST(AllGatherBytes, OneRankGetsItsOwnBytes) {
  ASSERT_EQ(size(), 1);
  const std::string bytes("a\0b\xff", 4);  // any bytes, NULs included
  const std::vector<std::string> all = all_gather_bytes(bytes);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], bytes);
  EXPECT_EQ(all_gather_bytes({}), std::vector<std::string>{std::string()});
}

}  // namespace
}  // namespace latentllm::dist
