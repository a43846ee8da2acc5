#include "cli/metrics_server.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace sqlgroup::cli {
namespace {

void Reply(mg_connection* conn, int code, const std::string& type,
           const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            code, code == 200 ? "OK" : "Service Unavailable", type.c_str(),
            body.size());
  mg_write(conn, body.data(), body.size());
}

int Probe(mg_connection* conn, const std::function<absl::Status()>& check) {
  const absl::Status s = check ? check() : absl::OkStatus();
  const int code = s.ok() ? 200 : 503;
  Reply(conn, code, "text/plain; charset=utf-8",
        s.ok() ? "ok\n" : absl::StrCat(s.message(), "\n"));
  return code;  // handled, with this status
}

}  // namespace

absl::Status CheckListenAddress(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  const std::string port =
      colon == std::string::npos ? addr : addr.substr(colon + 1);
  std::string host = colon == std::string::npos ? "" : addr.substr(0, colon);
  bool ok = !port.empty() && port.size() <= 5 &&
            std::all_of(port.begin(), port.end(),
                        [](char c) { return c >= '0' && c <= '9'; }) &&
            std::stoi(port) <= 65535;
  if (ok && colon != std::string::npos) {
    in6_addr any;
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      ok = inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &any) ==
           1;
    } else {
      ok = inet_pton(AF_INET, host.c_str(), &any) == 1;
    }
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--metrics_addr=", addr,
      ": expected an IP address and a port from 0 to 65535, such as "
      "127.0.0.1:9464, 0.0.0.0:9464 (every interface) or [::1]:9464; port 0 "
      "lets the OS pick one; an empty value serves no endpoint"));
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& addr, std::shared_ptr<prometheus::Registry> registry,
    HealthChecks health) {
  mg_init_library(0);
  std::unique_ptr<MetricsServer> server(
      new MetricsServer(std::move(registry), std::move(health)));
  const char* options[] = {"listening_ports", addr.c_str(), "num_threads", "2",
                           nullptr};
  char error_text[256] = "";
  mg_error_data error = {nullptr, error_text, sizeof error_text};
  mg_callbacks callbacks = {};
  // Civetweb would print its errors to stderr; they come back in `error`.
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
  mg_init_data init = {&callbacks, server.get(), options};
  server->context_ = mg_start2(&init, &error);
  if (server->context_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot listen on ", addr, " for metrics and health (",
        error_text[0] != '\0' ? error_text : "the address cannot be bound",
        "): the port is in use by another process, or the address is not "
        "this machine's; pass another --metrics_addr (port 0 lets the OS "
        "pick one) or --metrics_addr='' for none"));
  }
  mg_set_request_handler(server->context_, "/metrics$", &MetricsServer::Metrics,
                         server.get());
  mg_set_request_handler(server->context_, "/healthz$", &MetricsServer::Healthz,
                         server.get());
  mg_set_request_handler(server->context_, "/readyz$", &MetricsServer::Readyz,
                         server.get());
  return server;
}

MetricsServer::~MetricsServer() {
  if (context_ != nullptr) mg_stop(context_);
}

std::vector<int> MetricsServer::ports() const {
  mg_server_port ports[8];
  const int n = mg_get_server_ports(context_, 8, ports);
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(ports[i].port);
  return out;
}

int MetricsServer::Metrics(mg_connection* conn, void* self) {
  auto* server = static_cast<MetricsServer*>(self);
  const std::string body =
      prometheus::TextSerializer().Serialize(server->registry_->Collect());
  Reply(conn, 200, "text/plain; version=0.0.4; charset=utf-8", body);
  return 200;
}

int MetricsServer::Healthz(mg_connection* conn, void* self) {
  return Probe(conn, static_cast<MetricsServer*>(self)->health_.live);
}

int MetricsServer::Readyz(mg_connection* conn, void* self) {
  return Probe(conn, static_cast<MetricsServer*>(self)->health_.ready);
}

}  // namespace sqlgroup::cli
