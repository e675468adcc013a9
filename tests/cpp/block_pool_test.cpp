// The caching policy of the allocator's pools (runtime/block_pool.h), on the fake vendor: which
// requests reach the vendor, which are served from the cache, and what goes back.
#include <gtest/gtest.h>

#include <c10/util/Exception.h>

#include "fake_vendor.h"
#include "runtime/block_pool.h"

namespace devx {
namespace {

using c10::CachingAllocator::StatType;
constexpr size_t kMiB = 1 << 20;
constexpr size_t kAggregate = static_cast<size_t>(StatType::AGGREGATE);

class BlockPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test::set_vendor_capacity(SIZE_MAX);
    start_ = test::vendor_counts();
  }
  void TearDown() override {
    // Every test gives all it took back: the cache must return every segment.
    blocks_.free_segments(blocks_.detach_free_segments());
    EXPECT_EQ(test::vendor_counts().live_bytes, start_.live_bytes);
    test::set_vendor_capacity(SIZE_MAX);
  }
  int mallocs() const { return test::vendor_counts().mallocs - start_.mallocs; }
  int frees() const { return test::vendor_counts().frees - start_.frees; }

  AllocatorSettings settings_;
  DeviceBlocks blocks_{0, &settings_};
  test::VendorCounts start_{};
};

TEST_F(BlockPoolTest, SmallRequestsShareOneTwoMiBSegment) {
  Block* a = blocks_.allocate(512, 500, 0);
  Block* b = blocks_.allocate(4096, 4000, 0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(mallocs(), 1);
  EXPECT_EQ(static_cast<char*>(b->ptr), static_cast<char*>(a->ptr) + 512);
  EXPECT_EQ(blocks_.stats().reserved_bytes[kAggregate].current, int64_t(2 * kMiB));
  EXPECT_EQ(blocks_.stats().allocated_bytes[kAggregate].current, 512 + 4096);
  EXPECT_EQ(blocks_.stats().requested_bytes[kAggregate].current, 500 + 4000);
  blocks_.free(a);
  blocks_.free(b);
  EXPECT_EQ(blocks_.stats().allocated_bytes[kAggregate].current, 0);
}

TEST_F(BlockPoolTest, FreedBlocksMergeAndTheSegmentGoesBackWhole) {
  Block* a = blocks_.allocate(1024, 1024, 0);
  Block* b = blocks_.allocate(1024, 1024, 0);
  void* base = a->ptr;
  blocks_.free(a);
  blocks_.free(b);
  // Described, the cache is one free block: the whole segment, at its start.
  std::vector<const Block*> heads = blocks_.segment_heads({});
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_EQ(heads[0]->ptr, base);
  EXPECT_EQ(heads[0]->size, 2 * kMiB);
  EXPECT_EQ(heads[0]->next, nullptr);
  std::vector<Block*> segments = blocks_.detach_free_segments();
  EXPECT_EQ(segments.size(), 1u);
  blocks_.free_segments(segments);
  EXPECT_EQ(mallocs(), 1);
  EXPECT_EQ(frees(), 1);
  EXPECT_EQ(blocks_.stats().reserved_bytes[kAggregate].current, 0);
}

TEST_F(BlockPoolTest, AFreedSmallBlockServesTheNextRequestOfItsSize) {
  Block* a = blocks_.allocate(1024, 1000, 0);
  Block* b = blocks_.allocate(1024, 1000, 0);
  void* freed = a->ptr;
  blocks_.free(a);
  Block* other_size = blocks_.allocate(512, 512, 0);
  EXPECT_NE(other_size->ptr, freed);  // kept whole for its size, not split
  Block* other_stream = blocks_.allocate(1024, 1024, 1);
  EXPECT_NE(other_stream->ptr, freed);
  Block* again = blocks_.allocate(1024, 1024, 0);
  EXPECT_EQ(again->ptr, freed);
  EXPECT_EQ(blocks_.stats().allocated_bytes[kAggregate].current, 3 * 1024 + 512);
  EXPECT_EQ(blocks_.stats().requested_bytes[kAggregate].current, 1000 + 512 + 1024 + 1024);
  for (Block* block : {b, other_size, other_stream, again}) blocks_.free(block);
}

TEST_F(BlockPoolTest, RecentBlocksMergeBeforeASegmentIsAskedFor) {
  // A segment of 32 blocks of 64 KiB; four freed first stay whole in their size's recent list and
  // cut the others, freed after them, into runs of at most 512 KiB.
  std::vector<Block*> parts;
  for (int i = 0; i < 32; ++i) parts.push_back(blocks_.allocate(64 << 10, 64 << 10, 0));
  EXPECT_EQ(mallocs(), 1);
  void* base = parts[0]->ptr;
  for (int i : {8, 16, 24, 30}) blocks_.free(parts[i]);
  for (int i = 0; i < 32; ++i) {
    if (i != 8 && i != 16 && i != 24 && i != 30) blocks_.free(parts[i]);
  }
  // No run holds 1 MiB until the recent blocks merge: they do, and no segment is asked for.
  Block* big = blocks_.allocate(kMiB, kMiB, 0);
  EXPECT_EQ(big->ptr, base);
  EXPECT_EQ(mallocs(), 1);
  blocks_.free(big);
}

TEST_F(BlockPoolTest, AllocatedBlocksKeepTheirSegment) {
  Block* a = blocks_.allocate(1024, 1024, 0);
  EXPECT_TRUE(blocks_.detach_free_segments().empty());
  EXPECT_EQ(frees(), 0);
  blocks_.free(a);
}

TEST_F(BlockPoolTest, LargeRequestsGetSegmentsRoundedToTwoMiB) {
  Block* a = blocks_.allocate(3 * kMiB, 3 * kMiB, 0);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(blocks_.stats().reserved_bytes[kAggregate].current, int64_t(4 * kMiB));
  blocks_.free(a);
  // Best fit from the cache: no new vendor memory for a request that fits the freed block.
  Block* b = blocks_.allocate(4 * kMiB, 4 * kMiB, 0);
  EXPECT_EQ(mallocs(), 1);
  blocks_.free(b);
}

TEST_F(BlockPoolTest, ABlockServesOnlyTheStreamOfItsSegment) {
  Block* a = blocks_.allocate(1024, 1024, 0);
  blocks_.free(a);
  Block* b = blocks_.allocate(1024, 1024, 1);
  EXPECT_EQ(mallocs(), 2);
  Block* c = blocks_.allocate(1024, 1024, 0);
  EXPECT_EQ(mallocs(), 2);
  blocks_.free(b);
  blocks_.free(c);
}

TEST_F(BlockPoolTest, TheReserveLimitIsOutOfMemoryWithoutAskingTheVendor) {
  blocks_.set_reserve_limit(4 * kMiB);
  Block* a = blocks_.allocate(4 * kMiB, 4 * kMiB, 0);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(blocks_.allocate(2 * kMiB, 2 * kMiB, 0), nullptr);
  EXPECT_EQ(mallocs(), 1);
  blocks_.free(a);
  blocks_.set_reserve_limit(SIZE_MAX);
}

TEST_F(BlockPoolTest, AVendorOutOfMemoryIsANullBlock) {
  test::set_vendor_capacity(test::vendor_counts().live_bytes + 2 * kMiB);
  Block* a = blocks_.allocate(2 * kMiB, 2 * kMiB, 0);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(blocks_.allocate(2 * kMiB, 2 * kMiB, 0), nullptr);
  blocks_.free(a);
}

TEST_F(BlockPoolTest, AFreeSmallSegmentServesALargeRequest) {
  Block* a = blocks_.allocate(1024, 1024, 0);
  blocks_.free(a);
  Block* b = blocks_.allocate(2 * kMiB, 2 * kMiB, 0);
  EXPECT_EQ(mallocs(), 1);
  blocks_.free(b);
}

TEST_F(BlockPoolTest, BlocksAboveMaxSplitSizeAreNotCarvedUpBySmallerRequests) {
  settings_.max_split_size = 32 * kMiB;
  Block* big = blocks_.allocate(40 * kMiB, 40 * kMiB, 0);
  blocks_.free(big);
  Block* medium = blocks_.allocate(4 * kMiB, 4 * kMiB, 0);
  EXPECT_EQ(mallocs(), 2);
  EXPECT_EQ(blocks_.stats().oversize_allocations.current, 0);
  Block* again = blocks_.allocate(40 * kMiB, 40 * kMiB, 0);
  EXPECT_EQ(mallocs(), 2);
  EXPECT_EQ(blocks_.stats().oversize_allocations.current, 1);
  blocks_.free(medium);
  blocks_.free(again);
}

TEST(AllocatorSettingsTest, ParsesMaxSplitSizeAndNamesBadSettings) {
  setenv("DEVX_ALLOC_CONF", "max_split_size_mb:64", 1);
  EXPECT_EQ(read_allocator_settings().max_split_size, 64 * kMiB);
  setenv("DEVX_ALLOC_CONF", "max_split_size_mb:5", 1);
  try {
    read_allocator_settings();
    ADD_FAILURE() << "no error for max_split_size_mb:5";
  } catch (const c10::ValueError& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("DEVX_ALLOC_CONF='max_split_size_mb:5'"), std::string::npos);
  }
  unsetenv("DEVX_ALLOC_CONF");
  EXPECT_EQ(read_allocator_settings().max_split_size, SIZE_MAX);
}

}  // namespace
}  // namespace devx
