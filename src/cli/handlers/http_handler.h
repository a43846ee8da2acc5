// `--handler http://HOST:PORT/PATH` (or https://): each item is POSTed as
// ItemJson (Content-Type: application/json, Idempotency-Key: the item's
// id) on a keep-alive connection per worker thread (libcurl).
//
//   2xx                      acknowledged
//   408, 425, 429, 5xx       this attempt failed: retried after the backoff;
//                            a 429 or 503 with Retry-After (seconds or an
//                            HTTP-date) waits at least that long, at most
//                            --backoff_max (RetryAfterVerdict)
//   401, 403, 404, 405       retried too: the endpoint is misconfigured or
//                            not deployed yet, the item is not at fault
//   other 4xx                dead-lettered at once (the request is wrong;
//                            sending it again cannot help)
//   no answer in --handler_timeout, a broken connection, anything else
//                            this attempt failed: retried
//
// An endpoint that refuses connections (restarting, say) is tried again
// within the same attempt, with a growing pause, until --handler_timeout:
// nothing was sent, and the item's attempts are kept for real failures.
//
// The endpoint runs outside the acknowledging transaction: its effects are
// at-least-once (an item is sent again if the member dies before the ack
// commits); the Idempotency-Key lets it recognise a repeat.
#ifndef SQLGROUP_CLI_HANDLERS_HTTP_HANDLER_H_
#define SQLGROUP_CLI_HANDLERS_HTTP_HANDLER_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sqlgroup/item.h"

namespace sqlgroup::cli {

// INVALID_ARGUMENT, naming what is wrong, unless `url` is an http or https
// URL with a host.
absl::Status CheckHttpUrl(const std::string& url);

// The verdict for an HTTP status and the start of the response body (pure).
absl::Status HttpVerdict(long status, const std::string& body);
// The same, with the value of the response's Retry-After header (empty:
// none), read at `now`: a 429 or 503 that says when to come back is a
// RetryAfterVerdict; a value that is neither form is ignored (the usual
// backoff).
absl::Status HttpVerdict(long status, const std::string& body,
                         const std::string& retry_after, absl::Time now);

// The wait a Retry-After value asks for at `now` (RFC 9110 10.2.3):
// delta-seconds ("120") or an HTTP-date ("Sun, 06 Nov 1994 08:49:37 GMT";
// one in the past asks for no wait). nullopt for anything else.
std::optional<absl::Duration> ParseRetryAfter(const std::string& value,
                                              absl::Time now);

// Call once before any thread starts (libcurl's global setup).
void InitHttpClient();

// Extra request headers from a file (--handler_headers): one "Name: value"
// per line; empty lines and lines that begin with '#' are skipped. For
// credentials (Authorization: Bearer ...) that must show neither in `ps`
// nor in any message: an error names the file and the line, never a
// value. INVALID_ARGUMENT for a file that cannot be read or a line that is
// not a header.
absl::StatusOr<std::vector<std::string>> ReadHeaderFile(
    const std::string& path);

// A handler POSTing to `url` with `headers` ("Name: value") added to each
// request, each request bounded by `timeout`.
Handler MakeHttpHandler(std::string url, absl::Duration timeout,
                        std::vector<std::string> headers = {});

}  // namespace sqlgroup::cli

#endif  // SQLGROUP_CLI_HANDLERS_HTTP_HANDLER_H_
