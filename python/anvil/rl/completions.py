"""veRL's server-manager interface over an OpenAI-compatible `/v1/completions` that takes prompt
token ids and returns the sampled ones (vLLM's `return_token_ids`, anvil.local_model): the generation
backend of anvil's veRL agent loop where veRL does not run its own rollout servers (evaluation of a
served checkpoint, the CPU tests with the local Gemma 3 270M).

    server = CompletionsServer("http://127.0.0.1:8000", model="gemma-3-270m")
    out = await server.generate(request_id, prompt_ids=ids, sampling_params={"temperature": 1.0, "max_tokens": 256})
    out.token_ids, out.log_probs, out.stop_reason            # veRL's TokenOutput

Sampling parameters are veRL's (temperature, top_p, top_k with -1 for none, max_tokens, logprobs,
repetition_penalty, stop_token_ids, seed); log-probabilities are always asked for (the sampler's,
for veRL's rollout correction). A finish reason of "stop" or "length" is veRL's "completed", as its
vLLM server maps them. Standard library only; each request runs in a worker thread.
"""
import asyncio
import json
import urllib.error
import urllib.request

from verl.workers.rollout.replica import TokenOutput


class CompletionsError(RuntimeError):
    pass


class CompletionsServer:
    def __init__(self, base_url, model, api_key=None, timeout=600.0):
        self.url = base_url.rstrip("/")
        if self.url.endswith("/v1"):
            self.url = self.url[:-3]
        self.model, self.api_key, self.timeout = model, api_key, timeout

    def body(self, prompt_ids, sampling_params):
        p = dict(sampling_params)
        body = {"model": self.model, "prompt": list(prompt_ids), "max_tokens": int(p.pop("max_tokens", 1024)),
                "logprobs": 1, "return_token_ids": True}
        for key in ("temperature", "top_p", "seed"):
            if p.get(key) is not None:
                body[key] = p[key]
        if p.get("top_k") is not None and p["top_k"] > 0:
            body["top_k"] = int(p["top_k"])
        if p.get("repetition_penalty") not in (None, 1.0):
            body["repetition_penalty"] = p["repetition_penalty"]
        if p.get("stop_token_ids"):
            body["stop_token_ids"] = list(p["stop_token_ids"])
        return body

    def _post(self, body):
        req = urllib.request.Request(self.url + "/v1/completions", data=json.dumps(body).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", "Bearer " + self.api_key)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise CompletionsError("%s/v1/completions: HTTP %d: %s" % (self.url, e.code, e.read()[:500].decode(errors="replace")))

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        del request_id, kwargs  # one server: no sticky routing; no multi-modal data
        answer = await asyncio.to_thread(self._post, self.body(prompt_ids, sampling_params))
        choice = (answer.get("choices") or [{}])[0]
        ids = choice.get("token_ids")
        if not isinstance(ids, list):
            raise CompletionsError("%s/v1/completions returned no token_ids (vLLM needs return_token_ids)" % self.url)
        lp = (choice.get("logprobs") or {}).get("token_logprobs")
        finish = choice.get("finish_reason")
        return TokenOutput(token_ids=ids, log_probs=lp if isinstance(lp, list) and len(lp) == len(ids) else None,
                           stop_reason="completed" if finish in ("stop", "length") else finish)
