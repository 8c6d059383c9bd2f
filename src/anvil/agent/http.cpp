// http.cpp: HttpClient over libcurl, one easy handle per request.
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

size_t on_header(char* data, size_t size, size_t n, void* user) {
  std::string line = trim(std::string_view(data, size * n));
  if (!line.empty()) static_cast<std::vector<std::string>*>(user)->push_back(line);
  return size * n;
}

class CurlClient : public HttpClient {
 public:
  CurlClient() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  }

  HttpResponse send(const HttpRequest& req) override {
    HttpResponse res;
    auto t0 = std::chrono::steady_clock::now();
    CURL* h = curl_easy_init();
    if (!h) {
      res.error = "curl_easy_init failed";
      return res;
    }
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_slist* headers = nullptr;
    for (const auto& hd : req.headers) headers = curl_slist_append(headers, hd.c_str());
    curl_easy_setopt(h, CURLOPT_URL, req.url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM for DNS timeouts
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout.count()));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(req.connect_timeout.count()));
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
    } else if (req.method != "GET") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req.method.c_str());
    }
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK) {
      res.transport_ok = true;
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &res.status);
    } else {
      res.error = errbuf[0] ? std::string(errbuf) : std::string(curl_easy_strerror(rc));
    }
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
  }
};

}  // namespace

std::string HttpResponse::header(const std::string& name) const {
  auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
  };
  std::string want = lower(name);
  // The last response's headers win (after a 100 Continue, say).
  for (auto it = headers.rbegin(); it != headers.rend(); ++it) {
    size_t colon = it->find(':');
    if (colon != std::string::npos && lower(trim(it->substr(0, colon))) == want) return trim(it->substr(colon + 1));
  }
  return "";
}

std::unique_ptr<HttpClient> make_http_client() { return std::make_unique<CurlClient>(); }

}  // namespace anvil
