"""veRL's agent loop over `anvil serve` sessions (issue 19; docs/rl.md).

Registered as "anvil_agent" (a data set row's `agent_name`; python/anvil/rl/configs/agent_loops.yaml
names it for `actor_rollout_ref.rollout.agent.agent_loop_config_path`). One trajectory is one
session of the server (docs/service.md): its system prompt, task and tool schemas open the
conversation, the model's turns are sampled token-in/token-out through veRL's server manager, its
tool calls are parsed by veRL's tool parser (`rollout.multi_turn.format`, hermes by default) and run
by the session, their results are appended as masked tokens, and the session's fresh final
evaluation gives the milestone reward (-1, 1, 2, 3) as `reward_score`, with the evaluation and the
episode's record in `extra_fields`.

The sequence only grows: each turn's prompt is everything before it, token for token; what the
model sampled is never re-rendered. The tokens added after a turn are the chat template's (veRL's
Continuous Token builders; for a model without one of its own, anvil's seam below adds what the
template writes after the model's end token, the newline of Gemma's `<end_of_turn>\\n`, as
boundary tokens, mask 0). Limits as the paper's: 150 turns in training (`max_turns`; a row's
`extra_info.anvil.max_turns` overrides it: the evaluation set's rows say 200) and the sequence
within `rollout.prompt_length + rollout.response_length` (131,072 in the recipe). A turn may sample
at most `max_tokens_per_turn` and what is left of `response_length`; a turn cut there ends the
episode (`turn_cut`: its tool call is incomplete), as `anvil agent --tokens` does.

Malformed calls are answered, never run, and counted (the record's `malformed`, which `anvil rft`
drops on): a `<tool_call>` block the parser could not read is answered by a user message saying
so; a call the session refuses (unknown tool, arguments that are not the schema's) is answered by
the session's error text.

When anvil cannot judge (the server unreachable after the client's retries, an evaluation whose
outcome is `error` or `task_error`: anvil's environment or the task, not the candidate), the loop
raises AnvilUnavailable (`on_anvil_error: raise`, the default): a reward of -1 would punish the
policy for what it did not do. `on_anvil_error: zero` gives a trajectory whose evaluation anvil
could not make reward 0 instead, with extra_fields.anvil.status "error" (a server it cannot reach
still raises). A generation the rollout engine aborted raises RolloutAborted: not the policy's doing
either. Nothing the policy writes makes the loop raise: a call the session refuses is answered to
the model as an error and counted as malformed.
"""
import functools
import json
import logging
import os
import re
import time
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.experimental.agent_loop.tool_parser import ToolParser
from verl.tools.schemas import OpenAIFunctionToolSchema
from verl.utils.tokenizer.continuous_token import ContinuousTokenBuilder, MergeResult

from anvil.client import Client, ServeError

logger = logging.getLogger(__name__)

TRAIN_TURNS = 150   # the paper's limits: turns in training and in evaluation,
EVAL_TURNS = 200
CONTEXT = 131072    # and tokens of context for agentic RL
MARKUP = ("<tool_call>", "<function=", "[TOOL_CALLS]")
# The error kinds of a call the model wrote wrong: the session's tools' (bad_arguments, bad_json) and
# this loop's own answers to what the session would refuse (unknown_tool, too_many_calls, refused).
MALFORMED_KINDS = ("bad_arguments", "bad_json", "unknown_tool", "too_many_calls", "refused")
HERMES_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)  # veRL's hermes parser's blocks
FINALIZE_WAIT = 6 * 3600  # seconds a final evaluation may take, its queue's wait included
REWARD_KEYS = ("anvil_reward", "anvil_correct", "anvil_faster_than_eager", "anvil_faster_than_compile",
               "anvil_turns", "anvil_tool_calls", "anvil_malformed", "anvil_tool_errors")


# What veRL's AgentLoopWorker passes every loop (the rest of the kwargs are the loop's own settings).
_BASE_ARGS = {"trainer_config", "server_manager", "tokenizer", "processor", "dataset_cls", "data_config",
              "hf_model_type", "tools"}


class AnvilUnavailable(RuntimeError):
    """anvil could not judge a trajectory (its server or its environment, not the policy)."""


class TaskRowError(ValueError):
    """A data set row that does not say what anvil should judge."""


class RolloutAborted(RuntimeError):
    """The rollout engine aborted a generation (not the policy's doing)."""


def task_of(extra_info, index=None):
    """The row's anvil part: {"task": {"path"} | {"source", "name"}, "options"?, "max_turns"?}."""
    where = "row %s" % index if index is not None else "a row"
    anvil = (extra_info or {}).get("anvil")
    if not isinstance(anvil, dict):
        raise TaskRowError("%s: extra_info.anvil is missing (python -m anvil.rl.data makes rows with it)" % where)
    task = anvil.get("task")
    if not isinstance(task, dict) or not (isinstance(task.get("path"), str) or isinstance(task.get("source"), str)):
        raise TaskRowError('%s: extra_info.anvil.task must be {"path": ...} or {"source": ..., "name": ...}' % where)
    turns = anvil.get("max_turns")
    if turns is not None and (isinstance(turns, bool) or not isinstance(turns, int) or turns < 1):
        raise TaskRowError("%s: extra_info.anvil.max_turns must be a positive integer, not %r" % (where, turns))
    # Parquet gives a struct every field of the column's rows, None where a row has none
    return {"task": {k: v for k, v in task.items() if v is not None},
            "options": {k: v for k, v in (anvil.get("options") or {}).items() if v is not None},
            "max_turns": turns}


class TemplateSeam:
    """What a chat template writes after the model's end token in an assistant turn, before the next
    message (Gemma's "\\n" after <end_of_turn>), found by rendering a short conversation as anvil's
    C++ agent does (src/anvil/agent/token_turns.h): the tokens between the assistant turn's first end
    token and the next message's own (what veRL's builder appends). The next message is there so that
    a template that closes only the conversation's last turn otherwise (an <eos> after it) is not
    taken at its word. No seam where the renderings do not extend one another (logged)."""

    def __init__(self, builder, end_ids):
        prefix = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
        turn, after = [{"role": "assistant", "content": "ok"}], [{"role": "user", "content": "next"}]
        opened = builder._render_tokens(prefix, add_generation_prompt=True)
        full = builder._render_tokens(prefix + turn + after, add_generation_prompt=False)
        appended = builder._tokenize_single_non_tool(after[0], add_generation_prompt=False)
        self.trailing = {}
        if full[:len(opened)] != opened or not appended or full[len(full) - len(appended):] != appended:
            logger.warning("anvil_agent: the chat template's renderings do not extend one another: no seam "
                           "is added after the model's end token")
            return
        between = full[len(opened):len(full) - len(appended)]
        for end in end_ids:
            if end in between:
                self.trailing[end] = between[between.index(end) + 1:]

    def after(self, sequence):
        """The boundary tokens to insert after `sequence` (ending on a model's turn), or []."""
        if not sequence or sequence[-1] not in self.trailing:
            return []
        return list(self.trailing[sequence[-1]])


class SeamBuilder(ContinuousTokenBuilder):
    """veRL's default Continuous Token builder with the template's seam added between a model's
    end token and what is appended after it (as MergeResult.inserted_token_ids: mask 0)."""

    def __init__(self, tokenizer, end_ids, **kwargs):
        super().__init__(tokenizer, **kwargs)
        self.seam = TemplateSeam(self, end_ids)

    def _merge_context_token_ids(self, runtime_token_ids, appended_token_ids, **kwargs):
        inserted = self.seam.after(runtime_token_ids)
        if inserted and appended_token_ids[:len(inserted)] == inserted:
            inserted = []  # the appended tokens carry it already
        return MergeResult(token_ids=list(runtime_token_ids) + inserted + list(appended_token_ids),
                           appended_token_count=len(appended_token_ids), kind="context",
                           inserted_token_ids=inserted)


@functools.lru_cache(maxsize=8)
def generation_end_ids(model_path):
    """The generation config's eos ids of the model at `model_path` (veRL's copy of it, as its
    workers read it: an hdfs:// path too), once per process; None when it has none."""
    try:
        from transformers import GenerationConfig
        from verl.utils.fs import copy_to_local
        ids = GenerationConfig.from_pretrained(copy_to_local(model_path)).eos_token_id
    except Exception as e:  # noqa: BLE001 - no generation config, or a path this node cannot read
        logger.warning("anvil_agent: no generation config at %s (%s): the tokenizer's eos ends a turn", model_path, e)
        return None
    return tuple(ids) if isinstance(ids, (list, tuple)) else (ids,) if ids is not None else None


def end_token_ids(tokenizer, model_path=None):
    """The ids a model's turn ends on: its generation config's (what vLLM stops on), else the
    tokenizer's eos."""
    ids = generation_end_ids(model_path) if model_path else None
    if ids is None:
        ids = (tokenizer.eos_token_id,)
    return [int(i) for i in ids if i is not None]


def summary_of(arguments):
    """The finish call's summary, from its arguments as the model wrote them."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return None
    return args.get("summary") if isinstance(args, dict) else None


class Episode:
    """One trajectory's state: the sequence (prompt then response), the response's mask and the
    sampler's log-probabilities, the messages for the builder, and what the record counts."""

    def __init__(self, session, prompt_ids):
        self.session = session
        self.messages = list(session["messages"])  # veRL's view, for the Continuous Token builder
        self.seen = list(session["messages"])      # the record's: each assistant turn as sampled
        self.tools = session["tools"]
        self.schemas = [OpenAIFunctionToolSchema.model_validate(t) for t in self.tools]
        self.prompt_len = len(prompt_ids)
        self.sequence = list(prompt_ids)
        self.mask, self.logprobs = [], []
        self.logprobs_complete = True  # every turn's log-probabilities came with it
        self.turns, self.answers, self.tool_calls, self.tool_errors, self.malformed = [], 0, 0, 0, []
        self.end_reason, self.finish_summary = None, None
        self.metrics = {"generate_sequences": 0.0, "tool_calls": 0.0, "num_preempted": -1}
        self.engine = {}  # the rollout engine's extra fields (min/max_global_steps: the weights' versions)

    def record(self):
        return {"session": self.session["id"], "end_reason": self.end_reason, "turns": self.turns,
                "messages": self.seen, "tools": self.tools,
                "tool_calls": self.tool_calls, "tool_errors": self.tool_errors, "malformed": self.malformed,
                "finish_summary": self.finish_summary, "prompt_tokens": self.prompt_len,
                "response_tokens": len(self.mask), "model_tokens": sum(self.mask)}


SETTINGS = {"url": None, "token_env": "ANVIL_SERVE_TOKEN", "max_turns": TRAIN_TURNS, "max_tokens_per_turn": 8192,
            "options": None, "on_anvil_error": "raise", "log_dir": None, "connect_wait": 30}


def settings_of(entry, section):
    """The loop's settings: its defaults, then its entry in agent_loops.yaml (hydra's kwargs),
    then the trainer config's `anvil:` section (a stage file's, or a command line's anvil.X=...)."""
    from omegaconf import DictConfig, OmegaConf
    if isinstance(section, DictConfig):
        section = OmegaConf.to_container(section, resolve=True)
    merged = dict(SETTINGS)
    for where, values in (("agent_loops.yaml's anvil_agent entry", entry), ("the config's anvil section", section)):
        unknown = sorted(set(values or {}) - set(SETTINGS))
        if unknown:
            raise ValueError("anvil_agent: %s has unknown settings %s (known: %s)"
                             % (where, ", ".join(unknown), ", ".join(sorted(SETTINGS))))
        merged.update({k: v for k, v in (values or {}).items() if v is not None})
    if merged["on_anvil_error"] not in ("raise", "zero"):
        raise ValueError("anvil_agent: on_anvil_error must be raise or zero, not %r" % merged["on_anvil_error"])
    return merged


@register("anvil_agent")
class AnvilAgentLoop(AgentLoopBase):
    """veRL's AgentLoopBase over one anvil serve session per trajectory.

    Settings (SETTINGS; keys of the loop's entry in agent_loops.yaml, which hydra passes here, or
    of the trainer config's `anvil:` section, which wins):
      url                  anvil serve's address (default $ANVIL_SERVE_URL, else http://127.0.0.1:8571)
      token_env            the variable holding its bearer token (default ANVIL_SERVE_TOKEN)
      max_turns            model turns in a trajectory (default 150, the paper's for training)
      max_tokens_per_turn  sampled tokens in one turn (default 8192)
      options              the sessions' options (protocol, preset, ...; docs/service.md)
      on_anvil_error       raise (default) or zero: see the module's docstring
      log_dir              a directory for one JSON line per trajectory (anvil-rollouts-PID.jsonl)
      connect_wait         seconds of refused connections a call rides out (a server restarting; 30)
    """

    def __init__(self, *args, **kwargs):
        entry = {k: kwargs.pop(k) for k in list(kwargs) if k in SETTINGS or k not in _BASE_ARGS}
        entry.pop("name", None)
        super().__init__(*args, **kwargs)
        section = self.config.get("anvil")
        s = settings_of(entry, section)
        self.config_turns = (section or {}).get("max_turns")  # set in the config: wins over the rows
        self.url = s["url"] or os.environ.get("ANVIL_SERVE_URL") or "http://127.0.0.1:8571"
        self.client = Client(self.url, token=os.environ.get(s["token_env"], ""))
        self.client.refused_wait = s["connect_wait"]
        self.max_turns, self.max_tokens_per_turn = int(s["max_turns"]), int(s["max_tokens_per_turn"])
        self.options = dict(s["options"] or {})
        self.on_anvil_error, self.log_dir = s["on_anvil_error"], s["log_dir"]
        self.response_length = self.rollout_config.response_length
        self.tool_parser = ToolParser.get_tool_parser(self.rollout_config.multi_turn.format, self.tokenizer)
        self.end_ids = end_token_ids(self.tokenizer, self.config.actor_rollout_ref.model.get("path"))
        if type(self.continuous_token_builder) is ContinuousTokenBuilder:  # no model-specific builder
            self.continuous_token_builder = SeamBuilder(self.tokenizer, self.end_ids,
                                                        chat_template_kwargs=self.apply_chat_template_kwargs)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        extra = kwargs.get("extra_info") or {}
        anvil = task_of(extra, extra.get("index"))
        max_turns = self.config_turns or anvil.get("max_turns") or self.max_turns
        options = {**self.options, **(anvil.get("options") or {})}
        session = await self._anvil(self.client.create_session(anvil["task"], options or None))
        try:
            ep = Episode(session, await self._opening(session))
            await self._turns(ep, sampling_params, max_turns)
            result = await self._anvil(self.client.finalize(session["id"], limit=FINALIZE_WAIT))
            if result.get("status") != "done":
                raise AnvilUnavailable("anvil serve at %s: session %s's final evaluation %s not done after %d s"
                                       % (self.url, session["id"], result.get("id"), FINALIZE_WAIT))
        finally:
            try:
                await self.client.end_session(session["id"])
            except Exception as e:  # noqa: BLE001 - the session expires on its own (ttl)
                logger.warning("anvil: ending session %s: %s", session["id"], e)
        return self._output(ep, result)

    async def _opening(self, session):
        """The session's opening as the model's template renders it; refused when over
        rollout.prompt_length (veRL would cut its head: the system prompt)."""
        ids = await self.loop.run_in_executor(None, lambda: self.continuous_token_builder.build_initial_tokens(
            session["messages"], tools=session["tools"]))
        ids = list(ids)
        limit = self.rollout_config.prompt_length
        if len(ids) > limit:
            raise TaskRowError("task %s: the session's opening (SKILL.md, the task, the tools) is %d tokens, over "
                               "rollout.prompt_length %d" % (session.get("task", {}).get("name"), len(ids), limit))
        return ids

    async def _anvil(self, call):
        try:
            return await call
        except (ServeError, OSError, ValueError) as e:  # ValueError: an answer that is not JSON
            if isinstance(e, ServeError) and 400 <= e.status < 500 and e.status not in (408, 429):
                raise  # the request's fault (a task that does not import, say): say it as it is
            raise AnvilUnavailable("anvil serve at %s: %s" % (self.url, e)) from e

    async def _turns(self, ep, sampling_params, max_turns):
        while True:
            if len(ep.turns) >= max_turns:
                ep.end_reason = "max_turns"
                return
            left = self.response_length - len(ep.mask)
            if left <= 0:
                ep.end_reason = "max_context"
                return
            out = await self._generate(ep, sampling_params, min(self.max_tokens_per_turn, left))
            if ep.end_reason:
                return
            if not await self._act(ep, out):
                return

    async def _generate(self, ep, sampling_params, max_tokens):
        params = dict(sampling_params, max_tokens=max_tokens)
        if self.tool_parser.stop_token_ids:
            params["stop_token_ids"] = sorted(set((params.get("stop_token_ids") or []) + self.tool_parser.stop_token_ids))
        started = time.time()
        out = await self.server_manager.generate(request_id=ep.session["id"], prompt_ids=list(ep.sequence),
                                                 sampling_params=params)
        ep.metrics["generate_sequences"] += time.time() - started
        if out.num_preempted is not None:
            ep.metrics["num_preempted"] = max(0, ep.metrics["num_preempted"]) + out.num_preempted
        ids = list(out.token_ids)
        engine = dict(out.extra_fields or {})
        if not ep.engine:
            ep.engine.update(engine)
        elif engine.get("max_global_steps") is not None:
            ep.engine["max_global_steps"] = engine["max_global_steps"]
        if out.stop_reason == "aborted" or not ids:
            raise RolloutAborted("the rollout engine %s a generation of session %s (turn %d)"
                                 % ("aborted" if out.stop_reason == "aborted" else "returned no tokens for",
                                    ep.session["id"], len(ep.turns)))
        logprobs = list(out.log_probs) if out.log_probs is not None else []
        if len(logprobs) != len(ids):
            ep.logprobs_complete, logprobs = False, [0.0] * len(ids)  # kept aligned; given to veRL as None
        merge, ep.mask, ep.logprobs = await self.ct_merge_assistant_token(ep.sequence, ids, ep.mask, ep.logprobs,
                                                                          assistant_logprobs=logprobs)
        ep.sequence = merge.token_ids
        ep.turns.append({"index": len(ep.turns), "started_at": started, "sampled": len(ids),
                         "seconds": round(time.time() - started, 3), "calls": []})
        ended = bool(ids) and ids[-1] in self.end_ids
        ep.seen.append({"role": "assistant", "content": self.tokenizer.decode(ids[:-1] if ended else ids)})
        if not ended and len(ids) >= max_tokens:
            ep.end_reason = "turn_cut"  # it did not stop itself: a call in it is incomplete
        return ids

    async def _act(self, ep, ids):
        """Runs the turn's tool calls and appends their answers; False when the episode ends."""
        content, calls = await self.tool_parser.extract_tool_calls(ids, ep.schemas)
        text = self.tokenizer.decode(ids)
        blocks = self._blocks(text, len(calls))
        turn = ep.turns[-1]
        assistant = {"role": "assistant", "content": content or ""}
        previous = list(ep.messages)
        if calls:
            assistant["tool_calls"] = [{"id": "call_%d_%d" % (turn["index"], i), "type": "function",
                                        "function": {"name": c.name, "arguments": c.arguments}}
                                       for i, c in enumerate(calls)]
        ep.messages.append(assistant)
        if calls:
            ep.seen[-1]["tool_calls"] = assistant["tool_calls"]
        appended = await self._run_calls(ep, assistant.get("tool_calls", []), turn)
        if blocks > len(calls):
            ep.malformed.append({"turn": turn["index"], "kind": "bad_call" if calls else "raw_markup",
                                 "blocks": blocks, "parsed": len(calls)})
            appended.append({"role": "user", "content": self._markup_note(blocks, len(calls))})
        if ep.end_reason:  # finish (or the session's wall clock): nothing more to show the model
            return False
        if not appended:
            ep.end_reason = "no_tool_calls"
            return False
        ep.messages.extend(appended)
        ep.seen.extend(appended)
        ep.answers += 1
        merge, ep.mask, ep.logprobs = await self.ct_merge_context_msg(previous + [assistant], ep.messages,
                                                                      ep.sequence, ep.mask, ep.logprobs,
                                                                      tools=ep.tools)
        ep.sequence = merge.token_ids
        if len(ep.mask) >= self.response_length:
            ep.end_reason = "max_context"
            return False
        return True

    def _blocks(self, text, parsed):
        """How many tool calls the text tried: the hermes blocks (a block inside a call's string
        argument is part of that call), else, with no call parsed, whether any tool-call markup shows."""
        if self.rollout_config.multi_turn.format == "hermes":
            return max(parsed, len(HERMES_BLOCK.findall(text)) or (1 if "<tool_call>" in text and not parsed else 0))
        return parsed if parsed else (1 if any(m in text for m in MARKUP) else 0)

    async def _run_calls(self, ep, calls, turn):
        if not calls:
            return []
        started = time.time()
        results = await self._session_calls(ep, calls)
        ep.metrics["tool_calls"] += time.time() - started
        messages = []
        for call, r in zip(calls, results):
            ep.tool_calls += 1
            ep.tool_errors += bool(r.get("error"))
            if r.get("error_kind") in MALFORMED_KINDS:
                ep.malformed.append({"turn": turn["index"], "kind": r["error_kind"], "name": call["function"]["name"]})
            turn["calls"].append({"name": call["function"]["name"], "error": bool(r.get("error")),
                                  "error_kind": r.get("error_kind"), "seconds": r.get("seconds")})
            messages.append({"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"],
                             "content": r.get("content", "")})
            if r.get("finish"):
                ep.end_reason = "finish"
                ep.finish_summary = summary_of(call["function"]["arguments"])
            elif r.get("out_of_time"):
                ep.end_reason = "wall_clock"
        return messages

    async def _session_calls(self, ep, calls):
        """One result per call, in order. The session runs them one request each (a request's
        client timeout then bounds one call, not the policy's choice of many); what the session would
        refuse (a tool it has not, arguments that are not UTF-8 text, a call beyond the turn's limit,
        a request it answers 4xx) is answered here as the agent answers a malformed call, and
        counted; after a call that ends the episode (finish, the wall clock) the rest are not run."""
        names = {t["function"]["name"] for t in ep.tools}
        limit = int(ep.session.get("limits", {}).get("max_calls_per_request") or 32)
        results, ended = [], None
        for i, c in enumerate(calls):
            name, arguments = c["function"]["name"], c["function"]["arguments"]
            refusal = self._refusal(name, arguments, names, i, limit, ended)
            if refusal is None:
                try:
                    r = (await self._anvil(self.client.call_tools(
                        ep.session["id"], [{"name": name, "arguments": arguments, "id": c["id"]}])))[0]
                except ServeError as e:  # 4xx: the session refuses this call as sent
                    if e.status in (404, 409):
                        raise AnvilUnavailable("anvil serve at %s: session %s: %s" % (self.url, ep.session["id"], e))
                    refusal = ("refused", "error: %s: the call was refused: %s" % (name, e.message))
                else:
                    ended = ended or ("finish" if r.get("finish") else "wall_clock" if r.get("out_of_time") else None)
            if refusal is not None:
                kind, text = refusal
                r = {"name": name, "error": True, "error_kind": kind, "content": text}
            results.append(r)
        return results

    @staticmethod
    def _refusal(name, arguments, names, index, limit, ended):
        """(error_kind, answer) for a call not to send, or None."""
        if ended:
            return "not_run", "not run: the episode ended (%s) at an earlier call of this turn" % ended
        if name not in names:
            return "unknown_tool", "error: no tool named '%s' (the tools: %s)" % (name, ", ".join(sorted(names)))
        if index >= limit:
            return "too_many_calls", "error: not run: at most %d tool calls a turn" % limit
        try:
            (arguments if isinstance(arguments, str) else json.dumps(arguments)).encode("utf-8")
        except UnicodeEncodeError:
            return "bad_arguments", "error: %s: the arguments are not UTF-8 text (a lone surrogate?)" % name
        return None

    @staticmethod
    def _markup_note(blocks, parsed):
        return ("%d of your %d tool-call blocks could not be read: each must be "
                '<tool_call>{"name": "TOOL", "arguments": {...}}</tool_call> with valid JSON. '
                "Nothing was run for them." % (blocks - parsed, blocks))

    def _output(self, ep, result):
        status = "ok"
        if result.get("outcome") in ("error", "task_error") or result.get("reward") is None:
            if self.on_anvil_error == "raise":
                raise AnvilUnavailable("anvil could not evaluate session %s: %s"
                                       % (ep.session["id"], result.get("message") or result.get("outcome")))
            status = "error"
        reward = float(result["reward"]) if status == "ok" else 0.0
        record = dict(ep.record(), status=status, outcome=result.get("outcome"), reward=reward,
                      evaluation_id=result.get("id"), evaluation=result.get("evaluation"))
        self._log(record)
        info = {"anvil_reward": reward, "anvil_correct": float(status == "ok" and reward >= 1),
                "anvil_faster_than_eager": float(reward >= 2), "anvil_faster_than_compile": float(reward >= 3),
                "anvil_turns": len(ep.turns), "anvil_tool_calls": ep.tool_calls,
                "anvil_malformed": len(ep.malformed), "anvil_tool_errors": ep.tool_errors}
        # The response ends on the model's last token (the reward's place): context appended after
        # it, when a limit ended the episode there, is left out, as veRL's ToolAgentLoop does.
        n = min(self.response_length, max((i + 1 for i, m in enumerate(ep.mask) if m), default=0))
        logprobs = ep.logprobs[:n] if ep.logprobs_complete else None  # never zeros for the sampler's
        return AgentLoopOutput(
            prompt_ids=ep.sequence[:ep.prompt_len], response_ids=ep.sequence[ep.prompt_len:ep.prompt_len + n],
            response_mask=ep.mask[:n], response_logprobs=logprobs,
            reward_score=reward, num_turns=len(ep.turns) + ep.answers + 1,
            metrics=AgentLoopMetrics(**ep.metrics),
            extra_fields={**ep.engine, "anvil": record, "reward_extra_info": info, "turn_scores": [], "tool_rewards": []})

    def _log(self, record):
        if not self.log_dir:
            return
        os.makedirs(self.log_dir, exist_ok=True)
        line = json.dumps({k: v for k, v in record.items() if k != "evaluation"}, default=str)
        with open(os.path.join(self.log_dir, "anvil-rollouts-%d.jsonl" % os.getpid()), "a") as f:
            f.write(line + "\n")
