// Secrets in URLs, kept out of what sqlgroup shows: a handler's URL may
// carry a password (https://user:password@host/...) or a token in its query
// (?token=..., &api_key=..., &X-Amz-Signature=...). MaskUrl is what every
// log line, error, dead letter's last_error and `group describe` shows of
// one; the request itself uses the URL as given. Pure and thread-safe.
#ifndef SQLGROUP_URL_SECRETS_H_
#define SQLGROUP_URL_SECRETS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace sqlgroup {

// `url` with the password of its user info and the values of query
// parameters named like secrets (token, key, secret, password, passwd, pwd,
// signature, sig, auth, credential, session, in any case, alone or as part
// of the name: access_token, api_key, X-Amz-Signature) replaced by "***".
// Text that is not a URL comes back as it is.
//   MaskUrl("https://alice:pw@h/x?id=7&token=abc") ==
//       "https://alice:***@h/x?id=7&token=***"
std::string MaskUrl(absl::string_view url);

// `text` with every http:// or https:// URL in it masked as MaskUrl does
// (a URL ends at white space or a quote): for messages that quote one.
std::string MaskUrlsIn(absl::string_view text);

}  // namespace sqlgroup

#endif  // SQLGROUP_URL_SECRETS_H_
