// GraphCachePolicy (the CUDA backend's decode-graph cache), without a device: eager first,
// captured second, replayed after; at most `capacity` graphs, the least recently used evicted
// for a new bucket (which is then captured, not stuck eager); failed captures stay eager.
#include "engine/backend/cuda/graph_cache_policy.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace graph_cache_policy_test {

using Action = GraphCachePolicy::Action;
using Key = GraphCachePolicy::Key;

TEST(GraphCachePolicyTest, EagerThenCaptureThenReplay) {
  GraphCachePolicy p(4);
  const Key a{8, 16};
  EXPECT_EQ(p.Next(a).action, Action::kEager);
  const GraphCachePolicy::Decision d = p.Next(a);
  EXPECT_EQ(d.action, Action::kCapture);
  EXPECT_FALSE(d.evict.has_value());
  EXPECT_EQ(p.Next(a).action, Action::kReplay);
  EXPECT_EQ(p.Next(a).action, Action::kReplay);
  EXPECT_EQ(p.num_cached(), 1);
}

TEST(GraphCachePolicyTest, AFullCacheEvictsTheLeastRecentlyUsedForANewBucket) {
  GraphCachePolicy p(2);
  const Key a{1, 1}, b{2, 1}, c{4, 64};  // c: a long-context bucket that appears late
  for (const Key& k : {a, a, b, b}) (void)p.Next(k);
  ASSERT_EQ(p.num_cached(), 2);
  EXPECT_EQ(p.Next(a).action, Action::kReplay);  // b is now the least recently used
  EXPECT_EQ(p.Next(c).action, Action::kEager);
  const GraphCachePolicy::Decision d = p.Next(c);
  EXPECT_EQ(d.action, Action::kCapture);
  ASSERT_TRUE(d.evict.has_value());
  EXPECT_EQ(*d.evict, b);
  EXPECT_EQ(p.num_cached(), 2);
  EXPECT_EQ(p.Next(c).action, Action::kReplay);
  EXPECT_EQ(p.Next(a).action, Action::kReplay);
  // The evicted bucket starts over: eager once, then captured (evicting c, now the LRU).
  EXPECT_EQ(p.Next(b).action, Action::kEager);
  const GraphCachePolicy::Decision again = p.Next(b);
  EXPECT_EQ(again.action, Action::kCapture);
  EXPECT_EQ(*again.evict, c);
}

TEST(GraphCachePolicyTest, AFailedCaptureRunsEagerlyForGoodAndFreesItsPlace) {
  GraphCachePolicy p(1);
  const Key a{1, 1}, b{2, 2};
  (void)p.Next(a);
  ASSERT_EQ(p.Next(a).action, Action::kCapture);
  p.CaptureFailed(a);
  EXPECT_EQ(p.num_cached(), 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(p.Next(a).action, Action::kEager);
  (void)p.Next(b);
  const GraphCachePolicy::Decision d = p.Next(b);
  EXPECT_EQ(d.action, Action::kCapture);
  EXPECT_FALSE(d.evict.has_value());  // a held no place
}

TEST(GraphCachePolicyTest, CapacityZeroNeverCaptures) {
  GraphCachePolicy p(0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(p.Next({1, 1}).action, Action::kEager);
  EXPECT_EQ(p.num_cached(), 0);
}

}  // namespace graph_cache_policy_test
}  // namespace kvserve
