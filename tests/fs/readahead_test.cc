#include "fs/readahead.h"

#include <gtest/gtest.h>

namespace kvfs::fs {
namespace {

using Range = ReadaheadDetector::Range;

TEST(ReadaheadTest, ASerialLoadLoopIsFollowedKFilesAhead) {
  ReadaheadDetector d;
  EXPECT_TRUE(d.NoteOpen(100).empty()) << "the first file of a stream guesses nothing";
  Range r = d.NoteOpen(101);
  EXPECT_EQ(r.first, 102u);
  EXPECT_EQ(r.end, 102u + ReadaheadDetector::kFiles);
  Range next = d.NoteOpen(102);
  EXPECT_EQ(next.first, r.end) << "only what was not handed out before";
  EXPECT_EQ(next.end, r.end + 1);
}

TEST(ReadaheadTest, SmallGapsContinueAStreamLargeOnesStartAnother) {
  ReadaheadDetector d;
  d.NoteOpen(100);
  Range r = d.NoteOpen(100 + ReadaheadDetector::kMaxGap);  // directories made between keys
  EXPECT_FALSE(r.empty());
  EXPECT_TRUE(d.NoteOpen(100 + 3 * ReadaheadDetector::kMaxGap + 50).empty());
  EXPECT_TRUE(d.NoteOpen(90).empty()) << "descending order is no stream";
}

TEST(ReadaheadTest, TheSameFileAgainGuessesNothing) {
  ReadaheadDetector d;
  d.NoteOpen(5);
  ASSERT_FALSE(d.NoteOpen(6).empty());
  EXPECT_TRUE(d.NoteOpen(6).empty());
}

TEST(ReadaheadTest, FollowsKStreamsAtOnceAndReplacesTheLeastRecentlyUsed) {
  ReadaheadDetector d;
  const uint64_t n = ReadaheadDetector::kStreams;
  for (uint64_t s = 0; s < n; ++s) d.NoteOpen(1000 * (s + 1));
  for (uint64_t s = 0; s < n; ++s) {
    EXPECT_FALSE(d.NoteOpen(1000 * (s + 1) + 1).empty()) << "stream " << s;
  }
  // Stream 0 is the least recently used; a new one replaces it.
  d.NoteOpen(900000);
  EXPECT_TRUE(d.NoteOpen(1000 + 2).empty()) << "stream 0 was replaced";
  // That miss started a stream in the next least recently used slot
  // (stream 1's); stream 2 is still followed.
  EXPECT_FALSE(d.NoteOpen(3000 + 2).empty()) << "stream 2 is still followed";
}

TEST(ReadaheadTest, AFullQueueHandsOutNothingButKeepsFollowing) {
  ReadaheadDetector d;
  d.NoteOpen(10);
  EXPECT_TRUE(d.NoteOpen(11, /*room=*/false).empty());
  Range r = d.NoteOpen(12);
  EXPECT_EQ(r.first, 13u) << "the stream moved on with the loop";
  EXPECT_EQ(r.end, 13u + ReadaheadDetector::kFiles);
}

TEST(ReadaheadTest, ClearForgetsEveryStream) {
  ReadaheadDetector d;
  d.NoteOpen(10);
  d.Clear();
  EXPECT_TRUE(d.NoteOpen(11).empty());
}

}  // namespace
}  // namespace kvfs::fs
