#include "transport/transport.h"

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"

namespace baton::transport {
namespace {

TEST(TagTest, ToStringNamesEveryField) {
  EXPECT_EQ(TagToString(Tag{.comm = 0x0123abcd, .seq = 7, .step = 2, .part = 0}),
            "comm 0123abcd op 7 step 2 part 0");
  EXPECT_EQ(TagToString(Tag{.comm = 0xfedcba9876543210, .seq = 1, .step = 3, .part = 4}),
            "comm fedcba9876543210 op 1 step 3 part 4");
}

TEST(TagTest, EveryFieldTellsTagsApart) {
  const absl::flat_hash_set<Tag> tags = {Tag{},          Tag{.comm = 1}, Tag{.seq = 1},
                                         Tag{.step = 1}, Tag{.part = 1}, Tag{.comm = 1, .seq = 1}};
  EXPECT_EQ(tags.size(), 6u);
  EXPECT_TRUE(tags.contains(Tag{.comm = 1, .seq = 1}));
  EXPECT_FALSE(tags.contains(Tag{.comm = 2}));
}

}  // namespace
}  // namespace baton::transport
