#include "anvil/serve/http_server.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>

#include <openssl/crypto.h>

namespace anvil {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Json = nlohmann::json;

namespace {

HttpAnswer json_answer(const ServeReply& r) {
  HttpAnswer a;
  a.status = r.status;
  a.body = r.body.dump() + "\n";
  a.headers = r.headers;
  return a;
}

HttpAnswer error_answer(int status, const std::string& field, const std::string& message) {
  return json_answer(serve_error(status, field, message));
}

bool token_matches(const std::string& authorization, const std::string& token) {
  std::string want = "Bearer " + token;
  return authorization.size() == want.size() && CRYPTO_memcmp(authorization.data(), want.data(), want.size()) == 0;
}

// "wait=S" in a query string: S seconds (fractions allowed), at most 60; -1 when malformed.
double wait_seconds(const std::string& query) {
  for (size_t i = 0; i < query.size();) {
    size_t amp = query.find('&', i);
    std::string kv = query.substr(i, amp == std::string::npos ? std::string::npos : amp - i);
    if (kv.rfind("wait=", 0) == 0) {
      try {
        size_t used = 0;
        double s = std::stod(kv.substr(5), &used);
        if (used != kv.size() - 5 || !(s >= 0)) return -1;
        return std::min(s, 60.0);
      } catch (const std::exception&) {
        return -1;
      }
    }
    if (amp == std::string::npos) break;
    i = amp + 1;
  }
  return 0;
}

}  // namespace

HttpAnswer route(Service& service, const HttpServerOptions& opts, const std::string& method, const std::string& target,
                 const std::string& authorization, const std::string& idempotency_key, const std::string& body) {
  auto t0 = std::chrono::steady_clock::now();
  std::string path = target.substr(0, target.find('?'));
  std::string query = target.find('?') == std::string::npos ? "" : target.substr(target.find('?') + 1);
  std::string kind = "error";
  HttpAnswer a = [&]() -> HttpAnswer {
    if (path == "/health") {
      if (method != "GET") return error_answer(405, "method", "GET /health");
      kind = "health";
      return json_answer(service.health());
    }
    if (!opts.token.empty() && !token_matches(authorization, opts.token)) {
      HttpAnswer r = error_answer(401, "Authorization", "this server needs \"Authorization: Bearer TOKEN\"");
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return r;
    }
    if (path == "/metrics") {
      if (method != "GET") return error_answer(405, "method", "GET /metrics");
      kind = "metrics";
      HttpAnswer r;
      r.content_type = "text/plain; version=0.0.4";
      r.body = service.metrics();
      return r;
    }
    const std::string prefix = "/v1/evaluations";
    if (path == prefix || path == prefix + "/batch") {
      if (method != "POST") return error_answer(405, "method", "POST " + path);
      Json j;
      try {
        j = Json::parse(body);
      } catch (const std::exception& e) {  // nlohmann's message says where (the byte's position)
        return error_answer(400, "", std::string("malformed JSON: ") + e.what());
      }
      kind = path == prefix ? "submit" : "batch";
      return json_answer(path == prefix ? service.submit(j, idempotency_key) : service.submit_batch(j));
    }
    if (path.rfind(prefix + "/", 0) == 0) {
      if (method != "GET") return error_answer(405, "method", "GET " + prefix + "/ID");
      double wait = wait_seconds(query);
      if (wait < 0) return error_answer(400, "wait", "seconds to wait, a number from 0 to 60");
      kind = "get";
      return json_answer(service.get(path.substr(prefix.size() + 1),
                                     std::chrono::milliseconds(static_cast<int64_t>(wait * 1000))));
    }
    return error_answer(404, "path", "no such endpoint: " + method + " " + path);
  }();
  service.observe_request(kind, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return a;
}

struct HttpServer::Impl {
  Service& service;
  HttpServerOptions opts;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::atomic<int> connections{0};
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::condition_variable drained;
  std::set<int> open_fds;  // the connections' sockets, shut down by stop()

  Impl(Service& s, HttpServerOptions o) : service(s), opts(std::move(o)) {}

  void serve(tcp::socket sock) {
    timeval tv{opts.idle_timeout_s, 0};
    setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    beast::flat_buffer buf;
    beast::error_code ec;
    while (!stopping) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(opts.max_body);
      http::read(sock, buf, parser, ec);
      if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset) break;
      HttpAnswer a;
      bool keep = false;
      if (ec == http::error::body_limit) {
        a = error_answer(413, "body", "larger than " + std::to_string(opts.max_body) + " bytes");
      } else if (ec) {
        if (ec == asio::error::would_block || ec == asio::error::try_again || ec == asio::error::timed_out) break;
        a = error_answer(400, "", "not an HTTP request: " + ec.message());
      } else {
        auto& req = parser.get();
        keep = req.keep_alive();
        auto header = [&](http::field f) {
          auto it = req.find(f);
          return it == req.end() ? std::string() : std::string(it->value());
        };
        auto it = req.find("Idempotency-Key");
        std::string key = it == req.end() ? std::string() : std::string(it->value());
        a = route(service, opts, std::string(req.method_string()), std::string(req.target()),
                  header(http::field::authorization), key, req.body());
      }
      http::response<http::string_body> res{static_cast<http::status>(a.status), 11};
      res.set(http::field::server, "anvil");
      res.set(http::field::content_type, a.content_type);
      for (const auto& [k, v] : a.headers) res.set(k, v);
      res.keep_alive(keep);
      res.body() = std::move(a.body);
      res.prepare_payload();
      http::write(sock, res, ec);
      if (ec || !keep) break;
    }
    sock.shutdown(tcp::socket::shutdown_send, ec);
  }

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket sock) {
      if (ec) {
        if (!stopping) accept();
        return;
      }
      if (connections >= opts.max_connections) {
        HttpAnswer a = error_answer(503, "", "too many connections");
        http::response<http::string_body> res{http::status::service_unavailable, 11};
        res.set(http::field::content_type, a.content_type);
        res.body() = a.body;
        res.prepare_payload();
        beast::error_code wec;
        http::write(sock, res, wec);
      } else {
        {
          std::lock_guard<std::mutex> g(mu);
          open_fds.insert(sock.native_handle());
          ++connections;
        }
        std::thread([this, s = std::move(sock)]() mutable {
          int fd = s.native_handle();
          serve(std::move(s));
          std::lock_guard<std::mutex> g(mu);
          open_fds.erase(fd);
          --connections;
          drained.notify_all();
        }).detach();
      }
      accept();
    });
  }
};

HttpServer::HttpServer(Service& service, HttpServerOptions opts) : impl_(new Impl(service, std::move(opts))) {}

HttpServer::~HttpServer() { stop(); }

bool HttpServer::listen(std::string* error) {
  beast::error_code ec;
  auto addr = asio::ip::make_address(impl_->opts.host, ec);
  if (ec) {
    *error = "not an IP address: " + impl_->opts.host;
    return false;
  }
  tcp::endpoint ep(addr, impl_->opts.port);
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    *error = "cannot listen on " + impl_->opts.host + ":" + std::to_string(impl_->opts.port) + ": " + ec.message();
    return false;
  }
  return true;
}

uint16_t HttpServer::port() const { return impl_->acceptor.local_endpoint().port(); }

void HttpServer::run() {
  impl_->accept();
  impl_->ioc.run();
}

void HttpServer::stop() {
  if (impl_->stopping.exchange(true)) return;
  asio::post(impl_->ioc, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
  });
  impl_->ioc.stop();
  // The connections' reads end now; their threads finish the answer they are writing.
  std::unique_lock<std::mutex> g(impl_->mu);
  for (int fd : impl_->open_fds) ::shutdown(fd, SHUT_RD);
  impl_->drained.wait_for(g, std::chrono::seconds(65), [&] { return impl_->connections == 0; });
}

}  // namespace anvil
