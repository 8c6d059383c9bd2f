// http.h: one HTTP request, answered (libcurl underneath).
//
// A transport failure (refused, reset, timed out, DNS) is not an exception:
// it comes back as transport_ok = false with curl's description, so callers
// decide what to retry. Thread-safe: every send() uses its own handle.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace anvil {

struct HttpRequest {
  std::string method = "POST";        // GET, POST or DELETE
  std::string url;
  std::vector<std::string> headers;   // "Name: value"
  std::string body;                   // POST body
  std::chrono::milliseconds timeout{600000};         // whole request
  std::chrono::milliseconds connect_timeout{10000};
};

struct HttpResponse {
  bool transport_ok = false;  // false: no HTTP answer (see error)
  std::string error;          // "Failed to connect to 127.0.0.1 port 9: Connection refused"
  long status = 0;            // HTTP status when transport_ok
  std::string body;
  std::vector<std::string> headers;  // every response header line received, "Name: value" (status lines too)
  double seconds = 0;
  // The value of a header of the final response (case-insensitive name), or "".
  std::string header(const std::string& name) const;
};

class HttpClient {
 public:
  virtual ~HttpClient() = default;
  virtual HttpResponse send(const HttpRequest& req) = 0;
};

// The real client (libcurl; curl_global_init is done once, thread-safely).
std::unique_ptr<HttpClient> make_http_client();

}  // namespace anvil
