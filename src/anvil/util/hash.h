// hash.h: content hashing for cache keys (SHA-256 through OpenSSL).
//
// Inputs are delimited, as ccache does: add("a"); add("bc") and add("ab");
// add("c") give different digests, so two different input lists never collide
// by concatenation.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace anvil {

class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  // Adds a labelled, length-delimited field.
  Hasher& add(std::string_view label, std::string_view data);
  // Hex digest (64 characters). The hasher may not be used afterwards.
  std::string hex();

 private:
  void update(const void* data, size_t size);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Base64 (RFC 4648, padded) through OpenSSL; decode: nullopt for text that is not base64.
std::string base64_encode(std::string_view bytes);
std::optional<std::string> base64_decode(std::string_view text);

// SHA-256 hex digest of a byte string: plain SHA-256 (what sha256sum and hashlib give), not Hasher's fields.
std::string sha256_hex(std::string_view data);
// SHA-256 hex digest of a regular file's content, read in bounded chunks; nullopt if it cannot be
// read or is not a regular file (a FIFO, a device).
std::optional<std::string> hash_file(const std::filesystem::path& path);

}  // namespace anvil
