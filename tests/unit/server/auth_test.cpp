// ApiKeyAuth: Bearer parsing, matching any configured key, tenant identities.
#include "server/api/auth.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace auth_test {

TEST(AuthTest, OffAcceptsEveryone) {
  ApiKeyAuth auth({});
  EXPECT_FALSE(auth.enabled());
  EXPECT_EQ(auth.Authenticate(""), std::optional<std::string>(""));
  EXPECT_EQ(auth.Authenticate("Bearer whatever"), std::optional<std::string>(""));
}

TEST(AuthTest, BearerToken) {
  EXPECT_EQ(ApiKeyAuth::BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(ApiKeyAuth::BearerToken("bearer  abc "), "abc");
  EXPECT_EQ(ApiKeyAuth::BearerToken("Basic abc"), "");
  EXPECT_EQ(ApiKeyAuth::BearerToken("Bearer"), "");
  EXPECT_EQ(ApiKeyAuth::BearerToken("Bearerabc"), "");
  EXPECT_EQ(ApiKeyAuth::BearerToken(""), "");
}

TEST(AuthTest, MatchesAnyKeyAndNamesItsTenant) {
  ApiKeyAuth auth({"sk-one", "sk-two"});
  ASSERT_TRUE(auth.enabled());
  std::optional<std::string> one = auth.Authenticate("Bearer sk-one");
  std::optional<std::string> two = auth.Authenticate("Bearer sk-two");
  ASSERT_TRUE(one && two);
  EXPECT_NE(*one, *two);
  EXPECT_EQ(one->rfind("key-", 0), 0u);
  EXPECT_EQ(one->size(), 4u + 16u);
  EXPECT_EQ(auth.Authenticate("Bearer sk-one"), one);  // stable
  EXPECT_EQ(one->find("sk-one"), std::string::npos);   // never the key itself

  EXPECT_FALSE(auth.Authenticate(""));
  EXPECT_FALSE(auth.Authenticate("Bearer "));
  EXPECT_FALSE(auth.Authenticate("Bearer sk-on"));
  EXPECT_FALSE(auth.Authenticate("Bearer sk-one2"));
  EXPECT_FALSE(auth.Authenticate("Basic sk-one"));
  EXPECT_FALSE(auth.Authenticate("sk-one"));
}

TEST(AuthTest, EmptyKeysAreIgnored) {
  ApiKeyAuth auth({""});
  EXPECT_FALSE(auth.enabled());
}

}  // namespace auth_test
}  // namespace kvserve
