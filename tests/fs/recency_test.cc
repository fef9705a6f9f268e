// Recency: the order is exact LRU whatever the interleaving of uses (the
// lazy re-placement), names follow renames, removed files leave, and an
// evictor's pass-over set is honoured.
#include "fs/recency.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <random>

namespace kvfs::fs {
namespace {

std::vector<uint64_t> Inos(const std::vector<VictimOrder::Candidate>& v) {
  std::vector<uint64_t> out;
  for (const auto& e : v) out.push_back(e.ino);
  return out;
}

TEST(RecencyTest, OldestFollowsUsesThroughStampsAndTouch) {
  Recency r;
  for (uint64_t i = 1; i <= 5; ++i) r.Named(i, 1, "f" + std::to_string(i), int64_t(i) * 10);
  EXPECT_EQ(Inos(r.Next(10, {})), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  // A use through the shared stamp (what a read does) and one through Touch.
  r.StampOf(2)->Use(100);
  r.Touch(1, 90);
  EXPECT_EQ(Inos(r.Next(10, {})), (std::vector<uint64_t>{3, 4, 5, 1, 2}));
  // An earlier use racing a later one does not move the stamp back.
  r.StampOf(3)->Use(200);
  r.StampOf(3)->Use(95);
  EXPECT_EQ(Inos(r.Next(2, {})), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(Inos(r.Next(3, {4})), (std::vector<uint64_t>{5, 1, 2}));
  EXPECT_EQ(r.Next(1, {}).front().last_use_ns, 40);
}

TEST(RecencyTest, RenameRemoveAndUntrackedFiles) {
  Recency r;
  r.Named(7, 1, "tmp", 10);
  r.Named(8, 1, "other", 20);
  r.Moved(7, 3, "final");
  auto o = r.Next(1, {});
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].parent, 3u);
  EXPECT_EQ(o[0].name, "final");
  EXPECT_EQ(o[0].last_use_ns, 10);  // a rename is not a use
  r.Unnamed(7);
  EXPECT_EQ(Inos(r.Next(10, {})), (std::vector<uint64_t>{8}));
  // A file not tracked gets a stamp of its own: its uses change nothing.
  r.StampOf(99)->Use(5);
  r.Touch(99, 5);
  EXPECT_EQ(r.size(), 1u);
  EXPECT_EQ(Inos(r.Next(10, {})), (std::vector<uint64_t>{8}));
}

// Against a plain LRU list: random creates, uses and removes.
TEST(RecencyTest, MatchesAnLruModel) {
  Recency r;
  std::list<uint64_t> model;  // least recently used first
  std::mt19937_64 rng(22);
  int64_t now = 0;
  uint64_t next = 1;
  for (int step = 0; step < 20000; ++step) {
    ++now;
    const int op = int(rng() % 10);
    if (op < 2 || model.empty()) {
      r.Named(next, 1, "n", now);
      model.push_back(next++);
    } else {
      auto it = model.begin();
      std::advance(it, rng() % model.size());
      const uint64_t ino = *it;
      model.erase(it);
      if (op == 9) {
        r.Unnamed(ino);
      } else {
        (op < 6 ? r.StampOf(ino)->Use(now) : r.Touch(ino, now));
        model.push_back(ino);
      }
    }
    if (step % 97 == 0) {
      const size_t n = std::min<size_t>(model.size(), 16);
      std::vector<uint64_t> want(model.begin(), std::next(model.begin(), n));
      ASSERT_EQ(r.size(), model.size()) << "step " << step;
      ASSERT_EQ(Inos(r.Next(n, {})), want) << "step " << step;
    }
  }
  EXPECT_EQ(r.size(), model.size());
}

}  // namespace
}  // namespace kvfs::fs
