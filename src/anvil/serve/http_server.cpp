#include "anvil/serve/http_server.h"

#include <poll.h>
#include <strings.h>
#include <sys/socket.h>

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

#include "anvil/util/json_reader.h"
#include "anvil/util/json_text.h"
#include "anvil/util/peer.h"

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
  a.body = json_text(r.body) + "\n";  // hostile bytes: U+FFFD
  a.headers = r.headers;
  return a;
}

HttpAnswer error_answer(int status, const std::string& field, const std::string& message) {
  return json_answer(serve_error(status, field, message));
}

bool token_matches(const std::string& authorization, const std::string& token) {
  if (authorization.size() != 7 + token.size() || strncasecmp(authorization.c_str(), "Bearer ", 7) != 0) return false;
  return CRYPTO_memcmp(authorization.data() + 7, token.data(), token.size()) == 0;
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

bool authorized(const HttpServerOptions& opts, const std::string& target, const std::string& authorization) {
  return opts.token.empty() || target.substr(0, target.find('?')) == "/health" ||
         token_matches(authorization, opts.token);
}

namespace {

HttpAnswer unauthorized() {
  HttpAnswer r = error_answer(401, "Authorization", "this server needs \"Authorization: Bearer TOKEN\"");
  r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

HttpAnswer not_allowed(const std::string& allow, const std::string& path) {
  HttpAnswer r = error_answer(405, "method", allow + " " + path);
  r.headers.emplace_back("Allow", allow);
  return r;
}

// A JSON body, or the 400 that says where it is malformed.
std::optional<HttpAnswer> parse_body(const std::string& body, Json* out) {
  std::string err;  // the bounded reader: nesting past its limit is refused before anything recurses
  std::optional<Json> v = read_json(body, &err);
  if (!v) return error_answer(400, "", "malformed JSON: " + err);
  *out = std::move(*v);
  return std::nullopt;
}

//   POST /v1/sessions, GET|DELETE /v1/sessions/ID, POST /v1/sessions/ID/calls, POST /v1/sessions/ID/finalize
HttpAnswer sessions_route(Sessions& sessions, const std::string& method, const std::string& path, const std::string& body,
                          const std::string& idempotency_key, std::string* kind) {
  Json j;
  if (path == "/v1/sessions") {
    if (method != "POST") return not_allowed("POST", path);
    if (auto bad = parse_body(body, &j)) return *bad;
    *kind = "session_create";
    return json_answer(sessions.create(j, idempotency_key));
  }
  std::string rest = path.substr(std::string("/v1/sessions/").size());
  size_t slash = rest.find('/');
  std::string id = rest.substr(0, slash);
  std::string action = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (action.empty()) {
    if (method == "GET") {
      *kind = "session_get";
      return json_answer(sessions.get(id));
    }
    if (method == "DELETE") {
      *kind = "session_delete";
      return json_answer(sessions.remove(id));
    }
    return not_allowed("GET, DELETE", path);
  }
  if (action != "calls" && action != "finalize") return error_answer(404, "path", "no such endpoint: " + method + " " + path);
  if (method != "POST") return not_allowed("POST", path);
  if (action == "finalize") {
    *kind = "session_finalize";
    return json_answer(sessions.finalize(id));
  }
  if (auto bad = parse_body(body, &j)) return *bad;
  *kind = "session_calls";
  return json_answer(sessions.calls(id, j));
}

HttpAnswer dispatch(Service& service, const std::string& method, const std::string& path, const std::string& query,
                    const std::string& idempotency_key, const std::string& body, std::string* kind) {
  if (path == "/health") {
    if (method != "GET") return not_allowed("GET", path);
    *kind = "health";
    return json_answer(service.health());
  }
  if (path == "/metrics") {
    if (method != "GET") return not_allowed("GET", path);
    *kind = "metrics";
    HttpAnswer r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = service.metrics();
    return r;
  }
  if (path == "/v1/sessions" || path.rfind("/v1/sessions/", 0) == 0) {
    return sessions_route(service.sessions(), method, path, body, idempotency_key, kind);
  }
  const std::string prefix = "/v1/evaluations";
  if (path == prefix || path == prefix + "/batch") {
    if (method != "POST") return not_allowed("POST", path);
    Json j;
    if (auto bad = parse_body(body, &j)) return *bad;
    if (path == prefix) {
      *kind = "submit";
      return json_answer(service.submit(j, idempotency_key));
    }
    *kind = "batch";
    if (!idempotency_key.empty()) {
      return error_answer(400, "Idempotency-Key", "a batch takes each request's own idempotency_key, not the header");
    }
    return json_answer(service.submit_batch(j));
  }
  if (path.rfind(prefix + "/", 0) == 0) {
    if (method != "GET") return not_allowed("GET", path);
    double wait = wait_seconds(query);
    if (wait < 0) return error_answer(400, "wait", "seconds to wait, a number from 0 to 60");
    *kind = "get";
    return json_answer(service.get(path.substr(prefix.size() + 1),
                                   std::chrono::milliseconds(static_cast<int64_t>(wait * 1000))));
  }
  return error_answer(404, "path", "no such endpoint: " + method + " " + path);
}

}  // namespace

HttpAnswer route(Service& service, const HttpServerOptions& opts, const std::string& method, const std::string& target,
                 const std::string& authorization, const std::string& idempotency_key, const std::string& body) {
  auto t0 = std::chrono::steady_clock::now();
  std::string path = target.substr(0, target.find('?'));
  std::string query = target.find('?') == std::string::npos ? "" : target.substr(target.find('?') + 1);
  std::string kind = "error";
  HttpAnswer a;
  if (!authorized(opts, target, authorization)) {
    a = unauthorized();
  } else {
    try {
      a = dispatch(service, method, path, query, idempotency_key, body, &kind);
    } catch (const std::exception& e) {  // a defect of anvil's, answered; the server goes on
      kind = "error";
      a = error_answer(500, "", std::string("anvil could not answer: ") + e.what());
    }
  }
  service.observe_request(kind, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return a;
}

// A socket whose reads and writes end at a deadline (Beast's synchronous calls have none):
// a SyncReadStream and SyncWriteStream for http::read and http::write.
class TimedSocket {
 public:
  using executor_type = tcp::socket::executor_type;
  explicit TimedSocket(tcp::socket& s) : s_(s) {}
  executor_type get_executor() { return s_.get_executor(); }
  void expires_after(std::chrono::seconds d) { deadline_ = std::chrono::steady_clock::now() + d; }

  template <class Buffers>
  size_t read_some(const Buffers& b, beast::error_code& ec) {
    if (!ready(POLLIN, ec)) return 0;
    return s_.read_some(b, ec);
  }
  template <class Buffers>
  size_t read_some(const Buffers& b) {
    beast::error_code ec;
    size_t n = read_some(b, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }
  template <class Buffers>
  size_t write_some(const Buffers& b, beast::error_code& ec) {
    if (!ready(POLLOUT, ec)) return 0;
    return s_.write_some(b, ec);
  }
  template <class Buffers>
  size_t write_some(const Buffers& b) {
    beast::error_code ec;
    size_t n = write_some(b, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }

 private:
  bool ready(short events, beast::error_code& ec) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        ec = asio::error::timed_out;
        return false;
      }
      pollfd p = {s_.native_handle(), events, 0};
      int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
      if (n > 0) return true;
      if (n < 0 && errno != EINTR) {
        ec = beast::error_code(errno, beast::system_category());
        return false;
      }
    }
  }
  tcp::socket& s_;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::now();
};

struct HttpServer::Impl {
  Service& service;
  HttpServerOptions opts;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::steady_timer backoff{ioc};
  std::atomic<bool> stopping{false};
  std::mutex mu;                      // connections, open_fds
  std::condition_variable drained;
  int connections = 0;
  std::set<int> open_fds;  // the connections' sockets, shut down by stop()

  Impl(Service& s, HttpServerOptions o) : service(s), opts(std::move(o)) {}

  void answer(TimedSocket& stream, HttpAnswer a, bool keep, beast::error_code& ec, int timeout_s = 0) {
    http::response<http::string_body> res{static_cast<http::status>(a.status), 11};
    res.set(http::field::server, "anvil");
    res.set(http::field::content_type, a.content_type);
    for (const auto& [k, v] : a.headers) res.set(k, v);
    res.keep_alive(keep);
    res.body() = std::move(a.body);
    res.prepare_payload();
    stream.expires_after(std::chrono::seconds(timeout_s > 0 ? timeout_s : opts.idle_timeout_s));
    http::write(stream, res, ec);
  }

  // After an answer sent before its request's body was read (401, 413): the rest of the body read
  // and dropped (for at most 2 s, 64 MiB) before the connection closes, so that the client reads
  // the answer instead of a reset.
  void linger(tcp::socket& sock, TimedSocket& stream) {
    beast::error_code ec;
    sock.shutdown(tcp::socket::shutdown_send, ec);
    stream.expires_after(std::chrono::seconds(2));
    char drop[65536];
    for (size_t total = 0; total < (64u << 20);) {
      size_t n = stream.read_some(asio::buffer(drop), ec);
      if (ec || n == 0) break;
      total += n;
    }
  }

  // One connection: requests in turn (keep-alive) until the client closes, a read or write passes
  // its deadline, or the server stops. The token is checked on the header, before any body is read.
  void serve(tcp::socket& sock) {
    TimedSocket stream(sock);
    beast::flat_buffer buf;
    beast::error_code ec;
    if (opts.only_user) {  // no token: who connected decides, before anything is read
      std::string why;
      std::optional<uid_t> uid = loopback_peer_uid(sock.native_handle(), &why);
      if (!uid || (*uid != *opts.only_user && *uid != 0)) {
        std::string who = uid ? "user " + std::to_string(*uid) : "an unknown user (" + why + ")";
        answer(stream,
               error_answer(403, "", "this server has no token and serves only user " + std::to_string(*opts.only_user) +
                                         ", not " + who + ": run it with a token (--token-env) to serve others"),
               false, ec);
        return;  // no linger: a refused user's connection holds none of max_connections for long
      }
    }
    bool admitted = false;  // a request of this connection passed the token check
    while (!stopping) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(opts.max_body);
      stream.expires_after(std::chrono::seconds(admitted ? opts.idle_timeout_s : opts.header_timeout_s));
      http::read_header(stream, buf, parser, ec);
      if (ec == http::error::body_limit) {  // its Content-Length says so already
        answer(stream, error_answer(413, "body", "larger than " + std::to_string(opts.max_body) + " bytes"), false, ec);
        linger(sock, stream);
        break;
      }
      if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
          ec == asio::error::timed_out || ec == asio::error::operation_aborted) {
        break;
      }
      if (ec) {
        answer(stream, error_answer(400, "", "not an HTTP request: " + ec.message()), false, ec);
        break;
      }
      auto header = [&](const char* name) {
        auto it = parser.get().find(name);
        return it == parser.get().end() ? std::string() : std::string(it->value());
      };
      std::string target(parser.get().target());
      if (!authorized(opts, target, header("Authorization"))) {
        answer(stream, unauthorized(), false, ec);  // the body is not read: the connection closes
        linger(sock, stream);
        break;
      }
      admitted = true;
      stream.expires_after(std::chrono::seconds(opts.idle_timeout_s));  // the body: a large one takes its time
      http::read(stream, buf, parser, ec);
      if (ec == http::error::body_limit) {  // no Content-Length (chunked): found reading it
        HttpAnswer a = error_answer(413, "body", "larger than " + std::to_string(opts.max_body) + " bytes");
        answer(stream, std::move(a), false, ec);
        linger(sock, stream);
        break;
      }
      if (ec) break;  // a timeout or a reset mid-body: no one to answer
      auto& req = parser.get();
      bool keep = req.keep_alive() && !stopping;
      HttpAnswer a = route(service, opts, std::string(req.method_string()), target, header("Authorization"),
                           header("Idempotency-Key"), req.body());
      // The answer's write has a deadline of its own (a tool call may take minutes to answer).
      stream.expires_after(std::chrono::seconds(opts.idle_timeout_s));
      answer(stream, std::move(a), keep, ec);
      if (ec || !keep) break;
    }
    sock.shutdown(tcp::socket::shutdown_send, ec);
  }

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket sock) {
      if (stopping) return;
      if (ec) {  // out of descriptors, say: try again shortly, not in a spin
        backoff.expires_after(std::chrono::milliseconds(100));
        backoff.async_wait([this](beast::error_code) {
          if (!stopping) accept();
        });
        return;
      }
      std::unique_lock<std::mutex> g(mu);
      if (connections >= opts.max_connections) {
        g.unlock();
        TimedSocket stream(sock);
        HttpAnswer a = error_answer(503, "", "too many connections");
        a.headers.emplace_back("Retry-After", "1");
        beast::error_code wec;
        answer(stream, std::move(a), false, wec, 1);  // on the acceptor's thread: briefly
      } else {
        int fd = sock.native_handle();
        open_fds.insert(fd);
        ++connections;
        g.unlock();
        std::thread([this, fd, s = std::move(sock)]() mutable {
          serve(s);
          std::lock_guard<std::mutex> lock(mu);
          open_fds.erase(fd);  // before the descriptor can be reused
          beast::error_code cec;
          s.close(cec);
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
  // Stopped: every connection's thread ends (its reads were shut down, its writes have deadlines)
  // before the Service it calls can go.
  std::unique_lock<std::mutex> g(impl_->mu);
  impl_->drained.wait(g, [&] { return impl_->connections == 0; });
}

void HttpServer::stop() {
  if (impl_->stopping.exchange(true)) return;
  // On the acceptor's own thread: closed, its pending accept ends, and run()'s loop with it.
  asio::post(impl_->ioc, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
    impl_->backoff.cancel();
  });
  std::lock_guard<std::mutex> g(impl_->mu);
  for (int fd : impl_->open_fds) ::shutdown(fd, SHUT_RD);  // their reads end now
}

}  // namespace anvil
