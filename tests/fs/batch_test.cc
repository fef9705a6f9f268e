// BatchRunner over a real FileSystem (image file + RocksDB): results in
// input order, the in-flight bounds, hooks, refused entries, empty batches.
#include "fs/batch.h"

#include <atomic>
#include <cstdlib>
#include <future>
#include <mutex>

#include "common/format.h"
#include "fs/fs_fixture.h"

namespace kvfs::fs {
namespace {

const Caller kRoot{0, 0, 1, {}, {}};

class BatchTest : public FsTest {
 protected:
  // Runs `items` and waits for done; returns them.
  std::vector<BatchItem> RunAndWait(BatchRunner& r, std::vector<BatchItem> items) {
    std::promise<std::vector<BatchItem>> p;
    std::atomic<int> calls{0};
    r.Run(kRootIno, kRoot, std::move(items), [&](std::vector<BatchItem>& done) {
      ++calls;
      p.set_value(std::move(done));
    });
    auto out = p.get_future().get();
    EXPECT_EQ(calls.load(), 1);
    return out;
  }
  static BatchItem Item(BatchOp op, std::string path, std::span<char> data = {}) {
    BatchItem it;
    it.op = op;
    it.path = std::move(path);
    it.data = data;
    return it;
  }
};

TEST_F(BatchTest, EveryOpReportsPerEntryInInputOrder) {
  BatchRunner runner(*fs_, BatchLimits{});
  std::vector<std::string> contents;
  std::vector<std::vector<char>> bufs;
  std::vector<BatchItem> items;
  for (int i = 0; i < 40; ++i) {
    contents.push_back(Pattern(1000 + static_cast<size_t>(i) * 333, static_cast<uint32_t>(i)));
    bufs.emplace_back(contents.back().begin(), contents.back().end());
    items.push_back(Item(BatchOp::kWrite, "k" + std::to_string(i), bufs.back()));
  }
  // Deleted by the next batch, which names it nowhere else: entries of one
  // batch on the same name have no order between them (kvfs/ioctl.h).
  std::vector<char> doomed(100, 'd');
  items.push_back(Item(BatchOp::kWrite, "doomed", doomed));
  auto written = RunAndWait(runner, std::move(items));
  ASSERT_EQ(written.size(), 41u);
  for (size_t i = 0; i < 40; ++i) {
    EXPECT_EQ(written[i].error, 0) << i;
    EXPECT_EQ(written[i].result, contents[i].size()) << i;
  }
  EXPECT_EQ(written[40].error, 0);
  // Reads of every other name, stats of the rest and of missing names,
  // deletes at the end: each answer sits at its entry.
  std::vector<std::vector<char>> dest(40, std::vector<char>(20000, 0));
  items.clear();
  for (int i = 0; i < 40; ++i) {
    std::string name = "k" + std::to_string(i);
    if (i % 2 == 0) {
      items.push_back(Item(BatchOp::kRead, name, dest[static_cast<size_t>(i)]));
    } else {
      items.push_back(Item(BatchOp::kStat, name));
    }
    items.push_back(Item(BatchOp::kStat, "missing" + std::to_string(i)));
  }
  items.push_back(Item(BatchOp::kPrefetch, "k1"));
  items.push_back(Item(BatchOp::kDelete, "doomed"));
  auto out = RunAndWait(runner, std::move(items));
  ASSERT_EQ(out.size(), 82u);
  for (size_t i = 0; i < 40; ++i) {
    const BatchItem& hit = out[2 * i];
    EXPECT_EQ(hit.error, 0) << i;
    EXPECT_EQ(hit.result, contents[i].size()) << i;
    if (i % 2 == 0) {
      EXPECT_EQ(std::string(dest[i].data(), contents[i].size()), contents[i]) << i;
    }
    EXPECT_EQ(out[2 * i + 1].error, ENOENT) << i;
    EXPECT_EQ(out[2 * i + 1].result, 0u) << i;
  }
  EXPECT_EQ(out[80].error, 0);
  EXPECT_EQ(out[81].error, 0);
  EXPECT_FALSE(fs_->LookupPath(kRootIno, "doomed", kRoot).ok());
  EXPECT_TRUE(fs_->LookupPath(kRootIno, "k39", kRoot).ok());
}

TEST_F(BatchTest, InFlightEntriesAndBytesStayWithinTheLimits) {
  BatchLimits limits;
  limits.max_items_in_flight = 3;
  limits.max_bytes_in_flight = 3 * 8192;
  limits.threads = 2;
  BatchRunner runner(*fs_, limits);
  std::string data = Pattern(8192, 7);
  Store(kRootIno, "f", data);

  std::mutex mu;
  int inflight = 0, max_inflight = 0;
  uint64_t bytes = 0, max_bytes = 0;
  std::vector<std::vector<char>> dest(64, std::vector<char>(8192 + 4096));
  std::vector<BatchItem> items;
  for (size_t i = 0; i < 64; ++i) {
    BatchItem it = Item(BatchOp::kRead, "f");
    // Entries 10 and 20 are larger than the byte bound: they run alone.
    it.budget_bytes = (i == 10 || i == 20) ? 100000 : 8192;
    uint64_t b = it.budget_bytes;
    char* d = dest[i].data();
    it.prepare = [&, b, d](BatchItem& self) {
      std::lock_guard<std::mutex> l(mu);
      max_inflight = std::max(max_inflight, ++inflight);
      bytes += b;
      max_bytes = std::max(max_bytes, bytes);
      if (b > limits.max_bytes_in_flight) {
        EXPECT_EQ(bytes, b) << "a large entry runs alone";
      }
      self.data = std::span<char>(d, 8192);
      return Status::OK();
    };
    it.finish = [&, b](BatchItem&) {
      std::lock_guard<std::mutex> l(mu);
      --inflight;
      bytes -= b;
      return Status::OK();
    };
    items.push_back(std::move(it));
  }
  auto out = RunAndWait(runner, std::move(items));
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].error, 0) << i;
    EXPECT_EQ(std::string(dest[i].data(), 8192), data) << i;
  }
  EXPECT_LE(max_inflight, 3);
  EXPECT_LE(max_bytes, 100000u);
  EXPECT_EQ(inflight, 0);
}

TEST_F(BatchTest, RefusedEntriesAndFailingHooksReportTheirErrorAndSkipFinish) {
  BatchRunner runner(*fs_, BatchLimits{});
  Store(kRootIno, "f", "abc");
  std::atomic<int> finished{0};
  std::vector<char> dest(4096);
  std::vector<BatchItem> items;
  items.push_back(Item(BatchOp::kRead, "f", dest));
  items.back().error = EFAULT;  // refused while decoding
  items.back().finish = [&](BatchItem&) {
    ++finished;
    return Status::OK();
  };
  items.push_back(Item(BatchOp::kRead, "f", dest));
  items.back().prepare = [](BatchItem&) { return Status::Error(EPERM, "no access"); };
  items.back().finish = [&](BatchItem&) {
    ++finished;
    return Status::OK();
  };
  items.push_back(Item(BatchOp::kRead, "f", dest));
  items.back().finish = [&](BatchItem&) { return Status::Error(EFAULT, "copy-out failed"); };
  items.push_back(Item(BatchOp::kStat, "../f"));
  auto out = RunAndWait(runner, std::move(items));
  EXPECT_EQ(out[0].error, EFAULT);
  EXPECT_EQ(out[1].error, EPERM);
  EXPECT_EQ(out[2].error, EFAULT);
  EXPECT_EQ(out[2].result, 0u);
  EXPECT_EQ(out[3].error, EXDEV);
  EXPECT_EQ(finished.load(), 0);
}

TEST_F(BatchTest, AnEmptyBatchCompletesInline) {
  BatchRunner runner(*fs_, BatchLimits{});
  bool called = false;
  runner.Run(kRootIno, kRoot, {}, [&](std::vector<BatchItem>& items) {
    called = true;
    EXPECT_TRUE(items.empty());
  });
  EXPECT_TRUE(called);
}

TEST_F(BatchTest, ConcurrentBatchesAllComplete) {
  BatchLimits limits;
  limits.max_items_in_flight = 8;
  BatchRunner runner(*fs_, limits);
  constexpr int kBatches = 8;
  std::vector<std::promise<void>> done(kBatches);
  std::vector<std::vector<std::string>> data(kBatches);
  for (int b = 0; b < kBatches; ++b) {
    std::vector<BatchItem> items;
    for (int i = 0; i < 32; ++i) {
      data[b].push_back(Pattern(5000, static_cast<uint32_t>(b * 100 + i)));
    }
    for (int i = 0; i < 32; ++i) {
      std::string& d = data[b][static_cast<size_t>(i)];
      items.push_back(Item(BatchOp::kWrite, "b" + std::to_string(b) + "-" + std::to_string(i),
                           std::span<char>(d.data(), d.size())));
    }
    runner.Run(kRootIno, kRoot, std::move(items), [&, b](std::vector<BatchItem>& out) {
      for (const BatchItem& it : out) EXPECT_EQ(it.error, 0);
      done[static_cast<size_t>(b)].set_value();
    });
  }
  for (auto& d : done) d.get_future().get();
  auto a = fs_->LookupPath(kRootIno, "b7-31", kRoot);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size, 5000u);
}

}  // namespace
}  // namespace kvfs::fs
