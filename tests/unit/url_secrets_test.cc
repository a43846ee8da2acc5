// What sqlgroup shows of a URL (url_secrets.h).
#include "url_secrets.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace sqlgroup {
namespace {

TEST(MaskUrl, HidesThePasswordAndSecretQueryValues) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"http://alice:TopSecretPW@host/ship", "http://alice:***@host/ship"},
      {"https://alice:p@ss@h:8443/x", "https://alice:***@h:8443/x"},
      // A user name alone may be a token.
      {"https://ghp_T0ken@github.com/o/r", "https://***@github.com/o/r"},
      // Not percent-encoded: '/' and '@' in the password.
      {"https://u:ab/cd@h/x", "https://u:***@h/x"},
      {"https://u:a@b@h", "https://u:***@h"},
      {"https://h/cb#access_token=tk&state=1",
       "https://h/cb#access_token=***&state=1"},
      {"http://h/x?id=7&token=abc", "http://h/x?id=7&token=***"},
      {"http://h/x?api_key=k1&Access_Token=t&v=2#frag",
       "http://h/x?api_key=***&Access_Token=***&v=2#frag"},
      {"https://b.s3.amazonaws.com/o?X-Amz-Signature=ab12&X-Amz-Date=1",
       "https://b.s3.amazonaws.com/o?X-Amz-Signature=***&X-Amz-Date=1"},
      {"http://u:pw@h?password=x", "http://u:***@h?password=***"},
      {"http://h/path?token=", "http://h/path?token="},  // nothing to hide
      {"http://h/plain", "http://h/plain"},
      {"not a url", "not a url"},
  };
  for (const auto& [url, shown] : cases) {
    EXPECT_EQ(MaskUrl(url), shown) << url;
  }
}

TEST(MaskUrlsIn, MasksEachUrlInAMessage) {
  EXPECT_EQ(MaskUrlsIn("POST http://a:pw@h/x failed: Connection refused"),
            "POST http://a:***@h/x failed: Connection refused");
  EXPECT_EQ(MaskUrlsIn("\"https://h/?secret=s\" and http://b:c@d/ (httpd)"),
            "\"https://h/?secret=***\" and http://b:***@d/ (httpd)");
  EXPECT_EQ(MaskUrlsIn("no urls, just http and https words"),
            "no urls, just http and https words");
  EXPECT_EQ(MaskUrlsIn("HTTPS://U:Pw@H/x"), "HTTPS://U:***@H/x");
  EXPECT_EQ(MaskUrlsIn("(see http://h/?token=abc), then"),
            "(see http://h/?token=***), then");
  EXPECT_EQ(MaskUrlsIn(""), "");
}

}  // namespace
}  // namespace sqlgroup
