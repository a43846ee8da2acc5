#include "cli/handlers/http_handler.h"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cli/handlers/in_flight_calls.h"
#include "cli/handlers/item_json.h"
#include "cli/handlers/per_thread.h"
#include "member/backoff.h"
#include "url_secrets.h"

namespace sqlgroup::cli {
namespace {

// Enough of a response body to say why in a log line.
constexpr size_t kBodyKept = 300;

// One worker thread's connection: libcurl keeps it alive between items.
struct HttpSession {
  CURL* curl = curl_easy_init();
  curl_slist* headers = nullptr;
  ~HttpSession() {
    curl_slist_free_all(headers);
    if (curl) curl_easy_cleanup(curl);
  }
};

// Ends a transfer whose call was cut off (InFlightCalls), unless the
// endpoint has answered already: the work its answer reports is kept.
int AbortIfCut(void* curl, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  if (!CutOffNow()) return 0;
  long status = 0;
  curl_easy_getinfo(static_cast<CURL*>(curl), CURLINFO_RESPONSE_CODE, &status);
  return status == 0 ? 1 : 0;
}

size_t KeepBody(char* data, size_t size, size_t n, void* out) {
  auto* body = static_cast<std::string*>(out);
  const size_t bytes = size * n;
  if (body->size() < kBodyKept) {
    body->append(data, std::min(bytes, kBodyKept - body->size()));
  }
  return bytes;
}

std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return std::string(absl::StripAsciiWhitespace(text));
}

struct HttpState {
  std::string url;
  std::string shown;                 // MaskUrl(url): what messages say
  std::vector<std::string> headers;  // --handler_headers
  absl::Duration timeout;
  PerThread<HttpSession> sessions;
};

}  // namespace

absl::Status CheckHttpUrl(const std::string& url) {
  std::unique_ptr<CURLU, decltype(&curl_url_cleanup)> u(curl_url(),
                                                        &curl_url_cleanup);
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--handler=", MaskUrl(url), ": ", why,
        "; give an http or https URL, e.g. http://127.0.0.1:8080/items"));
  };
  if (curl_url_set(u.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) {
    return bad("is not a URL");
  }
  char* scheme = nullptr;
  char* host = nullptr;
  curl_url_get(u.get(), CURLUPART_SCHEME, &scheme, 0);
  const bool has_host =
      curl_url_get(u.get(), CURLUPART_HOST, &host, 0) == CURLUE_OK && host &&
      host[0] != '\0';
  const std::string s = scheme ? absl::AsciiStrToLower(scheme) : "";
  curl_free(scheme);
  curl_free(host);
  if (s != "http" && s != "https") {
    return bad(absl::StrCat("the scheme ", s, " is not http or https"));
  }
  if (!has_host) return bad("has no host");
  return absl::OkStatus();
}

std::optional<absl::Duration> ParseRetryAfter(const std::string& value,
                                              absl::Time now) {
  const std::string v(absl::StripAsciiWhitespace(value));
  if (v.empty()) return std::nullopt;
  if (std::all_of(v.begin(), v.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c));
      })) {
    int64_t seconds = 0;
    // Too many digits to hold: longer than any backoff_max anyway.
    if (!absl::SimpleAtoi(v, &seconds)) return absl::InfiniteDuration();
    return absl::Seconds(seconds);
  }
  // libcurl's parser of HTTP dates (RFC 1123, and the obsolete forms RFC
  // 9110 asks recipients to accept); -1 for what it cannot read.
  const time_t at = curl_getdate(v.c_str(), nullptr);
  if (at == -1) return std::nullopt;
  return std::max(absl::ZeroDuration(), absl::FromTimeT(at) - now);
}

absl::Status HttpVerdict(long status, const std::string& body) {
  return HttpVerdict(status, body, "", absl::UnixEpoch());
}

absl::Status HttpVerdict(long status, const std::string& body,
                         const std::string& retry_after, absl::Time now) {
  const std::string said =
      absl::StrCat("the endpoint answered ", status, body.empty() ? "" : ": ",
                   OneLine(body));
  if (status >= 200 && status < 300) return absl::OkStatus();
  if (status == 429 || status == 503) {
    // Too many requests, or down for a while: when the endpoint says when
    // to come back, the item is not tried sooner (up to --backoff_max).
    if (const auto wait = ParseRetryAfter(retry_after, now)) {
      return RetryAfterVerdict(
          *wait,
          absl::StrCat(said, " (Retry-After: ", OneLine(retry_after), ")"));
    }
  }
  if (status == 408 || status == 425 || status == 429 || status >= 500) {
    return absl::UnavailableError(said);
  }
  // The endpoint, not the item, is wrong (a bad token, a path not deployed
  // yet): retried, so a misconfiguration does not empty the queue into the
  // dead letters.
  if (status == 401 || status == 403 || status == 404 || status == 405) {
    return absl::FailedPreconditionError(absl::StrCat(
        said, " (the endpoint's URL or credentials look wrong; retried)"));
  }
  if (status >= 400) return DeadLetterVerdict(said);
  return absl::InternalError(absl::StrCat(said, " (expected 2xx, 4xx or 5xx)"));
}

void InitHttpClient() { curl_global_init(CURL_GLOBAL_DEFAULT); }

absl::StatusOr<std::vector<std::string>> ReadHeaderFile(
    const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--handler_headers ", path, " cannot be read: ", std::strerror(errno)));
  }
  std::vector<std::string> headers;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    const bool token =
        colon != std::string::npos && colon > 0 &&
        std::all_of(line.begin(), line.begin() + colon, [](char c) {
          return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                 c == '-' || c == '_';
        });
    if (!token) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--handler_headers ", path, ": line ", number,
          " is not a header: write Name: value, e.g. Authorization: Bearer "
          "TOKEN (its value is not shown here)"));
    }
    headers.push_back(line);
  }
  return headers;
}

Handler MakeHttpHandler(std::string url, absl::Duration timeout,
                        std::vector<std::string> headers) {
  auto state = std::make_shared<HttpState>();
  state->shown = MaskUrl(url);
  state->headers = std::move(headers);
  state->url = std::move(url);
  state->timeout = timeout;
  return [state](const Item& item, AckTransaction&) -> absl::Status {
    HttpSession* s = state->sessions.Get();
    if (s == nullptr) {
      auto made = std::make_unique<HttpSession>();
      if (made->curl == nullptr) {
        return absl::ResourceExhaustedError("cannot make an HTTP client");
      }
      s = made.get();
      state->sessions.Set(std::move(made));
      curl_easy_setopt(s->curl, CURLOPT_URL, state->url.c_str());
      curl_easy_setopt(s->curl, CURLOPT_NOSIGNAL, 1L);  // threads, timeouts
      curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, &KeepBody);
      curl_easy_setopt(s->curl, CURLOPT_XFERINFOFUNCTION, &AbortIfCut);
      curl_easy_setopt(s->curl, CURLOPT_XFERINFODATA, s->curl);
      curl_easy_setopt(s->curl, CURLOPT_NOPROGRESS, 0L);
    }
    const std::string body = ItemJson(item);
    curl_slist_free_all(s->headers);
    s->headers = nullptr;
    s->headers =
        curl_slist_append(s->headers, "Content-Type: application/json");
    // No "Expect: 100-continue" round trip before bigger bodies.
    s->headers = curl_slist_append(s->headers, "Expect:");
    s->headers = curl_slist_append(
        s->headers, absl::StrCat("Idempotency-Key: ", item.id).c_str());
    for (const std::string& header : state->headers) {
      s->headers = curl_slist_append(s->headers, header.c_str());
    }
    curl_easy_setopt(s->curl, CURLOPT_HTTPHEADER, s->headers);
    curl_easy_setopt(s->curl, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(s->curl, CURLOPT_POSTFIELDSIZE,
                     static_cast<long>(body.size()));
    std::string response;
    curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, &response);
    char error[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(s->curl, CURLOPT_ERRORBUFFER, error);
    // An endpoint that cannot be reached was sent nothing: trying again is
    // safe, and waiting here (up to the timeout) bridges a restart of the
    // endpoint without spending the item's attempts on it.
    const absl::Time give_up = absl::Now() + state->timeout;
    CURLcode rc;
    for (int tries = 1;; ++tries) {
      // Each try gets what is left: the timeout bounds the whole attempt.
      curl_easy_setopt(
          s->curl, CURLOPT_TIMEOUT_MS,
          std::max<long>(1, absl::ToInt64Milliseconds(give_up - absl::Now())));
      rc = curl_easy_perform(s->curl);
      const absl::Duration pause =
          Backoff(tries, absl::Milliseconds(100), absl::Seconds(2));
      if (rc != CURLE_COULDNT_CONNECT || absl::Now() + pause >= give_up ||
          CutOffNow()) {
        break;
      }
      absl::SleepFor(pause);
    }
    curl_easy_setopt(s->curl, CURLOPT_ERRORBUFFER, nullptr);
    if (rc == CURLE_ABORTED_BY_CALLBACK) {
      return CutOffError(absl::StrCat("POST ", state->shown));
    }
    if (rc == CURLE_OPERATION_TIMEDOUT) {
      return absl::DeadlineExceededError(absl::StrCat(
          "POST ", state->shown, ": no answer within ",
          absl::FormatDuration(state->timeout), " (--handler_timeout)"));
    }
    if (rc != CURLE_OK) {
      return absl::UnavailableError(absl::StrCat(
          "POST ", state->shown,
          " failed: ", MaskUrlsIn(error[0] ? error : curl_easy_strerror(rc))));
    }
    long status = 0;
    curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
    std::string retry_after;
    curl_header* header = nullptr;
    // The last response's (request -1: after any redirect).
    if (curl_easy_header(s->curl, "Retry-After", 0, CURLH_HEADER, -1,
                         &header) == CURLHE_OK &&
        header != nullptr && header->value != nullptr) {
      retry_after = header->value;
    }
    absl::Status verdict =
        HttpVerdict(status, response, retry_after, absl::Now());
    if (verdict.ok()) return verdict;
    // The message names the URL; the payloads (dead letter, Retry-After)
    // stay.
    absl::Status out(verdict.code(), absl::StrCat("POST ", state->shown, ": ",
                                                  verdict.message()));
    verdict.ForEachPayload(
        [&](absl::string_view url, const absl::Cord& payload) {
          out.SetPayload(url, payload);
        });
    return out;
  };
}

}  // namespace sqlgroup::cli
