// LISTENs on one channel of a connection and hands each NOTIFY's payload to
// a callback, on whichever thread reads the connection (pqxx dispatches
// notifications while it waits for results). Destroy it before the
// connection it listens on.
#ifndef SQLGROUP_STORE_CHANNEL_LISTENER_H_
#define SQLGROUP_STORE_CHANNEL_LISTENER_H_

#include <functional>
#include <pqxx/connection>
#include <pqxx/notification>
#include <string>

namespace sqlgroup::store {

class ChannelListener : public pqxx::notification_receiver {
 public:
  // Issues the LISTEN: throws pqxx's exceptions, so call it under
  // store::Guard.
  ChannelListener(pqxx::connection& conn, const std::string& channel,
                  std::function<void(const std::string&)> on_payload)
      : pqxx::notification_receiver(conn, channel),
        on_payload_(std::move(on_payload)) {}
  void operator()(const std::string& payload, int) override {
    on_payload_(payload);
  }

 private:
  const std::function<void(const std::string&)> on_payload_;
};

}  // namespace sqlgroup::store

#endif  // SQLGROUP_STORE_CHANNEL_LISTENER_H_
