"""A small asyncio client of `anvil serve` (docs/service.md), for RL adapters and tests.

    async with Client("http://127.0.0.1:8571") as c:
        result = await c.evaluate(task={"path": "level1/19_ReLU.py"},
                                  candidate={"source": open("model_new.py").read()})
        result["outcome"], result["reward"]

Standard library only (each call runs urllib in a worker thread), so it imports wherever anvil's
Python does. A submission refused with 429 is retried after the server's Retry-After, and one whose
connection failed is sent again when it has an idempotency key (evaluate() makes one per call), which
keeps it from running twice; long polls ride out a restarting server, and a refused connection
(nothing sent) is tried again for up to 30 s by every call. Errors the server answers (4xx, 5xx) raise ServeError with the field it names.
"""
import asyncio
import json
import os
import urllib.error
import urllib.request
import uuid


class ServeError(Exception):
    """The server answered an error: status, the field it names ("" for the whole request), message."""

    def __init__(self, status, field, message):
        super().__init__("%s: %s (HTTP %d)" % (field or "request", message, status))
        self.status = status
        self.field = field
        self.message = message


class Client:
    def __init__(self, url="http://127.0.0.1:8571", token=None, timeout=120.0, tool_timeout=3600.0):
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get("ANVIL_SERVE_TOKEN", "")
        self.timeout = timeout
        self.tool_timeout = tool_timeout  # a session's tool calls (a verify waits for a GPU, then runs)
        self.refused_wait = 30  # seconds of refused connections any call rides out (a server restarting)
        self.session_wait = 600  # seconds a session's creation waits out a server at --max-sessions (429)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    def _call(self, method, path, body=None, headers=None, timeout=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as r:
                raw, status, hdrs = r.read(), r.status, r.headers
        except urllib.error.HTTPError as e:
            raw, status, hdrs = e.read(), e.code, e.headers
        text = raw.decode(errors="replace")
        ctype = hdrs.get("Content-Type", "")
        payload = json.loads(text) if ctype.startswith("application/json") and text.strip() else text
        return status, payload, hdrs

    async def request(self, method, path, body=None, headers=None, transport_retries=0, timeout=None):
        """(status, body) of one call; an error status raises ServeError (but 429: see submit).
        A connection that fails (refused, reset: a server restarting) is tried again up to
        `transport_retries` times, a second apart."""
        attempt, refused = 0, 0
        while True:
            try:
                status, payload, hdrs = await asyncio.to_thread(self._call, method, path, body, headers, timeout)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                # A refused connection sent nothing: any call may be tried again (for up to
                # refused_wait seconds: a server restarting); another failure only as allowed.
                if isinstance(getattr(e, "reason", e), ConnectionRefusedError) and refused < self.refused_wait:
                    refused += 1
                elif attempt < transport_retries:
                    attempt += 1
                else:
                    raise
                await asyncio.sleep(1.0)
        if status >= 400:
            err = payload.get("error", {}) if isinstance(payload, dict) else {}
            e = ServeError(status, err.get("field", ""), err.get("message", str(payload)))
            e.retry_after = float(hdrs.get("Retry-After", "1") or 1)
            raise e
        return status, payload

    async def health(self):
        return (await self.request("GET", "/health"))[1]

    async def metrics(self):
        return (await self.request("GET", "/metrics"))[1]

    async def submit(self, task, candidate, options=None, key=None, retries=60):
        """Queues one evaluation; its id. A full queue (429) is waited out up to `retries` times."""
        body = {"task": task, "candidate": candidate}
        if options:
            body["options"] = options
        headers = {"Idempotency-Key": key} if key else None
        for attempt in range(retries + 1):
            try:  # with a key, a submission whose answer was lost is safe to send again
                return (await self.request("POST", "/v1/evaluations", body, headers,
                                           transport_retries=10 if key else 0))[1]["id"]
            except ServeError as e:
                if e.status != 429 or attempt == retries:
                    raise
                await asyncio.sleep(e.retry_after)

    async def result(self, evaluation_id, wait=30.0):
        """The evaluation's state after waiting up to `wait` seconds for it to be done."""
        return (await self.request("GET", "/v1/evaluations/%s?wait=%g" % (evaluation_id, min(wait, 60)),
                                   transport_retries=10))[1]

    async def wait(self, evaluation_id, limit=None):
        """Long polls until the evaluation is done (or `limit` seconds pass: its last state)."""
        loop = asyncio.get_running_loop()
        end = None if limit is None else loop.time() + limit
        while True:
            left = 30.0 if end is None else max(0.0, min(30.0, end - loop.time()))
            asked = loop.time()
            r = await self.result(evaluation_id, wait=left)
            if r["status"] == "done" or (end is not None and loop.time() >= end):
                return r
            if loop.time() - asked < 1.0:  # answered at once (a server stopping): not in a spin
                await asyncio.sleep(1.0)

    async def evaluate(self, task, candidate, options=None, key=None, limit=None):
        """submit() and wait(): {"outcome", "reward", "message", "evaluation" (anvil.eval/1), ...}."""
        key = key or uuid.uuid4().hex
        return await self.wait(await self.submit(task, candidate, options, key=key), limit=limit)

    # -- sessions ---------------------------------------------------------------------------------
    async def create_session(self, task, options=None, ttl_s=None, key=None):
        """A session for `task` ({"path"} on the server, or {"source", "name"}): {"id", "workdir",
        "tools" (chat-completions tool schemas), "messages" (the system prompt and the task),
        "expires_at", "limits", "existed"}. Sent with an idempotency key (`key`, else a new one),
        so a creation whose answer was lost is safe to send again: the same session comes back."""
        body = {"task": task}
        if options:
            body["options"] = options
        if ttl_s is not None:
            body["ttl_s"] = ttl_s
        headers = {"Idempotency-Key": key or uuid.uuid4().hex}
        loop = asyncio.get_running_loop()
        end = loop.time() + max(60.0, self.timeout)  # a task's probe can be slow on a loaded host
        full_until = loop.time() + self.session_wait
        while True:
            try:
                return (await self.request("POST", "/v1/sessions", body, headers, transport_retries=10))[1]
            except ServeError as e:
                # 409 with Retry-After: the first try is still making it; 429: --max-sessions are open
                # (a trainer's batch as large as the limit waits for sessions to end)
                making = e.status == 409 and e.field == "idempotency_key" and loop.time() < end
                full = e.status == 429 and loop.time() < full_until
                if not (making or full):
                    raise
                await asyncio.sleep(max(1.0, e.retry_after))

    async def call_tools(self, session_id, calls):
        """Runs `calls` ([{"name", "arguments" (an object, or the model's JSON text)}, "id"?]) in
        order on the server; one result each: {"name", "content" (the tool message's text),
        "error", "error_kind"?, "finish", "out_of_time", "seconds", "detail"?}. Not retried: a tool
        call is not idempotent."""
        return (await self.request("POST", "/v1/sessions/%s/calls" % session_id, {"calls": calls},
                                   timeout=self.tool_timeout))[1]["results"]

    async def finalize(self, session_id, limit=None):
        """The session's workdir judged afresh (once, however often asked: a lost answer is safe to
        ask again): the evaluation's result as wait() gives it (outcome, reward, evaluation)."""
        r = (await self.request("POST", "/v1/sessions/%s/finalize" % session_id, transport_retries=10))[1]
        return await self.wait(r["evaluation"], limit=limit)

    async def session(self, session_id):
        return (await self.request("GET", "/v1/sessions/%s" % session_id))[1]

    async def end_session(self, session_id):
        """Ends the session. A DELETE whose answer was lost is sent again; a 404 then means the first
        one ended it."""
        try:
            return (await self.request("DELETE", "/v1/sessions/%s" % session_id))[1]
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        try:
            return (await self.request("DELETE", "/v1/sessions/%s" % session_id, transport_retries=10))[1]
        except ServeError as e:
            if e.status != 404:
                raise
            return {"id": session_id, "deleted": True}
