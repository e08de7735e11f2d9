// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104): the tensor-parallel port's handshake (a worker
// proves it holds the group's shared secret by a MAC over nonces, without sending it), `glmc up`'s
// checkpoint hashes and Anthropic thinking signatures. Written here rather than taken from OpenSSL
// so that base/ keeps no dependency beyond the standard library.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace glm {

using Sha256Digest = std::array<uint8_t, 32>;

/// Incremental SHA-256.
class Sha256 {
public:
  Sha256();
  Sha256 &add(const void *data, size_t bytes);
  Sha256 &add(std::string_view bytes) { return add(bytes.data(), bytes.size()); }
  /// The digest; the object must not be used after.
  Sha256Digest finish();

private:
  void block(const uint8_t *p);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0; // bytes added
};

/// HMAC-SHA256 of `message` under `key` (any length: longer keys are hashed first, RFC 2104).
Sha256Digest hmacSha256(std::string_view key, std::string_view message);

/// Whether two digests are equal, in time that does not depend on where they differ.
bool digestsEqual(const Sha256Digest &a, const Sha256Digest &b);

/// Lower-case hex of `bytes`.
std::string hexOf(const uint8_t *bytes, size_t count);

/// `count` bytes from the kernel's random source (getrandom); false if it failed.
bool randomBytes(uint8_t *out, size_t count);

} // namespace glm
