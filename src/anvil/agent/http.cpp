// http.cpp: HttpClient over libcurl, one easy handle per request.
//
// Implementation notes:
// - A fresh easy handle per send() keeps requests independent across threads
//   (libcurl handles must not be shared between threads without locking); the
//   cost, a new TCP connection per request, is nothing next to a generation.
// - CURLOPT_NOSIGNAL: libcurl would otherwise use SIGALRM for DNS timeouts,
//   which is unsafe with threads.
// - "Expect:" is sent empty: for bodies over 1 KiB (every agent request) curl
//   would otherwise ask for "100 Continue" and wait up to a second for
//   servers that never send it.
// - TCP keep-alive: a long generation leaves the connection silent for
//   minutes, which NATs and load balancers may take for a dead one.
#include "anvil/agent/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <mutex>

#include "anvil/util/strings.h"

namespace anvil {

namespace {

size_t on_body(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

// Every header line of every response received (a 100 Continue or a redirect
// comes before the final one); HttpResponse::header() reads from the end.
size_t on_header(char* data, size_t size, size_t n, void* user) {
  std::string line = trim(std::string_view(data, size * n));
  if (!line.empty()) static_cast<std::vector<std::string>*>(user)->push_back(line);
  return size * n;
}

// curl_global_init is not thread-safe; it runs once, before the first handle.
CURLcode global_init() {
  static std::once_flag once;
  static CURLcode rc = CURLE_OK;
  std::call_once(once, [] { rc = curl_global_init(CURL_GLOBAL_DEFAULT); });
  return rc;
}

class CurlClient : public HttpClient {
 public:
  CurlClient() { global_init(); }

  HttpResponse send(const HttpRequest& req) override {
    HttpResponse res;
    auto t0 = std::chrono::steady_clock::now();
    if (CURLcode g = global_init(); g != CURLE_OK) {
      res.error = std::string("curl_global_init failed: ") + curl_easy_strerror(g);
      return res;
    }
    if (req.method != "GET" && req.method != "POST" && req.method != "DELETE") {
      res.error = "unsupported HTTP method '" + req.method + "' (GET, POST or DELETE)";
      return res;
    }
    CURL* h = curl_easy_init();
    if (!h) {
      res.error = "curl_easy_init failed";
      return res;
    }
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_slist* headers = nullptr;
    for (const auto& hd : req.headers) headers = curl_slist_append(headers, hd.c_str());
    if (req.method == "POST") headers = curl_slist_append(headers, "Expect:");
    curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout.count()));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(req.connect_timeout.count()));
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &res.body);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &res.headers);
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "");  // whatever curl can decode
    if (req.method == "POST") {
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, req.body.data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(req.body.size()));
    } else if (req.method == "DELETE") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    } else {
      curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    }
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK) {
      res.transport_ok = true;
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &res.status);
    } else {
      // errbuf is the specific message ("Failed to connect to 127.0.0.1 port 9 ...:
      // Connection refused"); the code's generic text only when curl left it empty.
      res.error = errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
    }
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
  }
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

std::string HttpResponse::header(const std::string& name) const {
  std::string want = lower(name);
  // Only the final response's headers count (not those of a 100 Continue or a
  // redirect before it): read back from the end to its status line.
  for (auto it = headers.rbegin(); it != headers.rend(); ++it) {
    if (starts_with(*it, "HTTP/")) break;
    size_t colon = it->find(':');
    if (colon != std::string::npos && lower(trim(it->substr(0, colon))) == want) return trim(it->substr(colon + 1));
  }
  return "";
}

std::unique_ptr<HttpClient> make_http_client() { return std::make_unique<CurlClient>(); }

}  // namespace anvil
