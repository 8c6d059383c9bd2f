// http_server.h: `anvil serve`'s HTTP/1.1 front (Boost.Beast), routing to a Service.
//
//   GET  /health                      no token needed
//   GET  /metrics                     Prometheus text
//   POST /v1/evaluations              one request -> 202 {id} (200 when its idempotency key is known)
//   POST /v1/evaluations/batch        {"evaluations": [...]} -> 202 {ids}
//   GET  /v1/evaluations/ID[?wait=S]  its state; done: outcome, reward, the evaluation (S <= 60)
//   POST /v1/sessions                 {task, options?, ttl_s?} -> 201 {id, tools, messages, workdir}
//   GET|DELETE /v1/sessions/ID        its state | its end
//   POST /v1/sessions/ID/calls        {calls: [{name, arguments}]} -> {results}, in order
//   POST /v1/sessions/ID/finalize     -> 202 {evaluation}: the workdir evaluated as POST /v1/evaluations
//
// Every connection has a thread of its own (keep-alive, bodies up to max_body bytes: 413 beyond,
// reads and writes with deadlines). With a token, every call but /health needs "Authorization:
// Bearer TOKEN" (401, checked on the header before any body is read); without one, only
// only_user's (and root's) connections are served (403 for another local user's, before anything
// is read). An exception while answering is a 500, never the server's end.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "anvil/serve/service.h"

namespace anvil {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8571;          // 0: any free port (port() says which)
  std::string token;             // "" : no authorization (loopback only; cmd_serve enforces it)
  // Without a token: the one local user (besides root) whose connections are served; anyone else's
  // is answered 403 before its request is read (util/peer.h tells who connected).
  std::optional<uid_t> only_user;
  size_t max_body = 16u << 20;   // bytes of one request's body
  int max_connections = 256;     // beyond: 503 and the connection closed
  int idle_timeout_s = 75;       // a read or a write taking longer ends its connection (> a long poll's 60 s)
  // A connection's first request header must arrive whole within this: until a request has passed
  // the token check, a silent connection holds one of max_connections for seconds, not idle_timeout_s.
  int header_timeout_s = 10;
};

class HttpServer {
 public:
  HttpServer(Service& service, HttpServerOptions opts);
  ~HttpServer();
  bool listen(std::string* error);  // binds and listens; false and *error when it cannot
  uint16_t port() const;
  void run();   // accepts and serves until stop(), then waits for every connection's thread to end
  void stop();  // from any thread (a signal's waiter): no new connections, the open ones' reads end

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The routing alone (no sockets), for tests: method, target ("/v1/evaluations/3?wait=1"), the
// Authorization header's value and the body -> status, content type, body, extra headers.
// Whether a request may be served (the token, when there is one; /health needs none).
bool authorized(const HttpServerOptions& opts, const std::string& target, const std::string& authorization);

struct HttpAnswer {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};
HttpAnswer route(Service& service, const HttpServerOptions& opts, const std::string& method, const std::string& target,
                 const std::string& authorization, const std::string& idempotency_key, const std::string& body);

}  // namespace anvil
