// The fingerprint of items enqueued under an idempotency key (schema 16):
// a second enqueue with the key adds nothing only when its fingerprint is
// the first one's, and fails otherwise. The bytes are those of
// sqlgroup.enqueue_fingerprint (sql/016_enqueue_fingerprints.sql), so a key
// used from C++ and from SQL is checked alike: SHA-256 of, for each item in
// order, 0x00 (no key) or 0x01 and the key's length (int4, big-endian) and
// bytes; the payload's length and bytes; the delay in microseconds (int8,
// 0 for none or a negative one). The key's bytes are its UTF-8 (what the
// SQL side hashes): keys in another client encoding are not checked alike.
// Pure and thread-safe.
#ifndef SQLGROUP_ENQUEUE_FINGERPRINT_H_
#define SQLGROUP_ENQUEUE_FINGERPRINT_H_

#include <string>
#include <vector>

#include "sqlgroup/producer.h"

namespace sqlgroup {

// The 32 bytes.
std::string EnqueueFingerprint(const std::vector<NewItem>& items);

}  // namespace sqlgroup

#endif  // SQLGROUP_ENQUEUE_FINGERPRINT_H_
