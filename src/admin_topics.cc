// Admin's topics (schema 20, docs/TOPICS.md): refuses an older schema in
// words, and leaves the rules to the schema's functions
// (store/topic_store.h).
#include "admin_impl.h"
#include "sqlgroup/admin.h"
#include "status_macros.h"
#include "store/topic_store.h"

namespace sqlgroup {
absl::Status Admin::CreateTopic(const std::string& name) {
  RETURN_IF_ERROR(store::CheckTopicsStored(*impl_->conn));
  return store::CreateTopic(*impl_->conn, name);
}

absl::Status Admin::DeleteTopic(const std::string& name) {
  RETURN_IF_ERROR(store::CheckTopicsStored(*impl_->conn));
  return store::DeleteTopic(*impl_->conn, name);
}

absl::StatusOr<std::vector<TopicInfo>> Admin::ListTopics() {
  RETURN_IF_ERROR(store::CheckTopicsStored(*impl_->conn));
  return store::ListTopics(*impl_->conn, std::nullopt,
                           /*count_waiting=*/false);
}

absl::StatusOr<TopicInfo> Admin::DescribeTopic(const std::string& name) {
  RETURN_IF_ERROR(store::CheckTopicsStored(*impl_->conn));
  ASSIGN_OR_RETURN(std::vector<TopicInfo> topics,
                   store::ListTopics(*impl_->conn, name,
                                     /*count_waiting=*/true));
  return std::move(topics.front());
}

absl::StatusOr<bool> Admin::SetGroupTopic(
    const std::string& group, const std::optional<std::string>& topic) {
  RETURN_IF_ERROR(store::CheckTopicsStored(*impl_->conn));
  return store::SetGroupTopic(*impl_->conn, group, topic);
}

}  // namespace sqlgroup
