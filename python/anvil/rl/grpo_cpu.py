"""A real GRPO run that fits on a CPU: TRL's GRPOTrainer trains the local Gemma 3 270M (full
fine-tuning, float32) on anvil's CPU tasks, every sample judged by a running `anvil serve`.

    python -m anvil.rl.grpo_cpu --serve URL --tasks DIR|FILE... --steps 3 --out DIR
        [--generations 4] [--max-completion-tokens 64] [--seed 0] [--lr 1e-6] [--temperature 0.7]
        [--threads 1] [--checkpoint DIR]

The paper's warm-up stage (single-turn RL before the agentic one), at the size of a CPU: each step
takes one task, samples --generations answers to it and makes one optimizer step. The prompt (Gemma's
chat template) shows the task's reference code and asks for `class ModelNew`, KernelBench's
single-file candidate; the model's turn is prefilled with the opening fence, the reference's imports
and `class ModelNew(nn.Module):`, so that copying the class under the new name is a likely
continuation for a 270M model (a group of all-equal rewards teaches GRPO nothing).

The candidate of a completion (`candidate_of`) is the prefill's code and then the completion's
lines up to the first line that is a ``` fence or starts in column 0 with anything but blank: the
body of the class the prefill opened; what follows it is not judged. A completion whose body has
no code at all gets reward -1 without an evaluation (counted as `no_code`). Every other candidate is
sent to the server, all of a step's at once (anvil.client), under the `kernelbench` protocol (torch
ops allowed in ModelNew); its reward (-1, 1, 2, 3) is the sample's reward as it is (GRPO normalizes
within the group). An evaluation anvil could not make (outcome `error`, reward null) is skipped,
not punished: its reward is None, which TRL counts out of the group's baseline with advantage 0
(counted as `errors`). A server that cannot be reached or refuses a request stops the run.

DIR/log.jsonl has a line per step (its task, each sample's reward, outcome and evaluation id, the
mean and spread, TRL's loss and grad norm, the seconds of generation, reward, forward/backward and
optimizer step); DIR/summary.json the run (model, checkpoint and its sha256, versions, tasks,
settings, wall time, machine, and a check that training changed the weights).
"""
import argparse
import asyncio
import datetime
import hashlib
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time

from anvil.client import Client

INSTRUCTION = ("Rewrite this PyTorch model as `class ModelNew`: the same constructor arguments, parameters "
               "and outputs as `Model`. Plain PyTorch operations are allowed. Answer with one Python code block.")
FENCE = "```"
PROTOCOL = {"protocol": "kernelbench"}


def task_files(paths):
    """The task files named: a file as it is, a directory's *.py files that define `class Model` and
    `get_inputs` (so a candidate beside them is not taken for a task), sorted."""
    found = []
    for p in paths:
        if os.path.isdir(p):
            for name in sorted(os.listdir(p)):
                text = open(os.path.join(p, name)).read() if name.endswith(".py") else ""
                if "class Model(" in text and "def get_inputs" in text:
                    found.append(os.path.join(p, name))
        elif os.path.isfile(p):
            found.append(p)
        else:
            raise SystemExit("--tasks %s: no such file or directory" % p)
    if not found:
        raise SystemExit("--tasks: no task files in %s" % " ".join(paths))
    return found


def prompt_of(source, tokenizer):
    """(prompt text, prefill) for one task: the chat's user turn shows the reference without its
    comments, and the model's turn starts with the prefill (the answer's opening). The text has no
    leading <bos>: TRL's tokenizer call adds it."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("#")).strip()
    imports = [line for line in code.splitlines() if line.startswith(("import ", "from "))]
    message = "%s\n\n%spython\n%s\n%s" % (INSTRUCTION, FENCE, code, FENCE)
    text = tokenizer.apply_chat_template([{"role": "user", "content": message}], tokenize=False,
                                         add_generation_prompt=True)
    if text.startswith(tokenizer.bos_token):
        text = text[len(tokenizer.bos_token):]
    prefill = "%spython\n%s\n\n\nclass ModelNew(nn.Module):\n" % (FENCE, "\n".join(imports))
    return text + prefill, prefill


def candidate_of(prefill, completion):
    """The candidate's source, or None when the completion adds no code to the prefill (see the
    module's docstring for the rule)."""
    body = []
    for line in completion.split("\n"):
        if line.lstrip().startswith(FENCE) or (line.strip() and not line[0].isspace()):
            break
        body.append(line)
    if not "".join(body).strip():
        return None
    return prefill[len(FENCE + "python\n"):] + "\n".join(body).rstrip() + "\n"


class AnvilReward:
    """TRL's reward function (async: TRL runs it on its event loop): each completion judged by the
    server. What each step was given and answered is kept in `steps` for the log."""

    def __init__(self, url, limit=900.0):
        self.url, self.limit = url, limit
        self.steps = []  # one dict per call, in order

    async def __call__(self, prompts, completions, prefill, task_name, task_source, **kwargs):
        del prompts, kwargs
        started = time.monotonic()
        candidates = [candidate_of(p, c) for p, c in zip(prefill, completions)]
        async with Client(self.url) as client:
            async def judge(i):
                if candidates[i] is None:
                    return None
                return await client.evaluate({"source": task_source[i], "name": task_name[i]},
                                             {"source": candidates[i]}, PROTOCOL, limit=self.limit)
            results = await asyncio.gather(*(judge(i) for i in range(len(candidates))))
        samples = []
        for text, candidate, r in zip(completions, candidates, results):
            if r is None:
                samples.append({"reward": -1, "outcome": "no_code", "evaluation": None, "message": "",
                                "completion": text, "candidate": None})
            elif r.get("status") != "done":
                raise RuntimeError("anvil serve did not finish evaluation %s in %.0f s" % (r.get("id"), self.limit))
            else:  # outcome "error" has reward None: skipped by TRL, never -1
                samples.append({"reward": r["reward"], "outcome": r["outcome"], "evaluation": r["id"],
                                "message": (r.get("message") or "")[:300], "completion": text,
                                "candidate": candidate})
        self.steps.append({"task": task_name[0], "samples": samples, "seconds": time.monotonic() - started})
        return [s["reward"] for s in samples]


def step_record(reward_step, logs, times):
    """One line of log.jsonl from the reward function's record, TRL's logs and the step's timers."""
    samples = reward_step["samples"]
    rewards = [s["reward"] for s in samples]
    scored = [r for r in rewards if r is not None]
    seconds = {"generation": times["generation"], "reward": reward_step["seconds"],
               "optimizer": times["optimizer"], "step": times["step"]}
    seconds["forward_backward"] = seconds["step"] - seconds["generation"] - seconds["reward"] - seconds["optimizer"]
    return {
        "step": times["number"], "task": reward_step["task"], "rewards": rewards,
        "reward_mean": statistics.mean(scored) if scored else None,
        "reward_std": statistics.pstdev(scored) if scored else None,
        "outcomes": [s["outcome"] for s in samples], "evaluations": [s["evaluation"] for s in samples],
        "no_code": sum(s["outcome"] == "no_code" for s in samples),
        "errors": sum(s["reward"] is None for s in samples),
        "loss": logs.get("loss"), "grad_norm": logs.get("grad_norm"), "kl": logs.get("kl"),
        "learning_rate": logs.get("learning_rate"),
        "completion_tokens_mean": logs.get("completions/mean_length"),
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "samples": samples,
    }


def make_callback(reward, log_path, timers):
    """A TrainerCallback that times each step's optimizer step and whole step and writes its line."""
    from transformers import TrainerCallback

    class StepLog(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            timers.update(begin=time.monotonic(), generation=0.0)

        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            timers["optimizer_begin"] = time.monotonic()

        def on_optimizer_step(self, args, state, control, **kwargs):
            timers["optimizer"] = time.monotonic() - timers["optimizer_begin"]

        def on_step_end(self, args, state, control, **kwargs):
            timers.update(step=time.monotonic() - timers["begin"], number=state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs or "number" not in timers:
                return
            record = step_record(reward.steps[-1], logs, timers)
            timers.pop("number")
            with open(log_path, "a") as f:
                f.write(json.dumps(record) + "\n")
            print(table_row(record), flush=True)

    return StepLog()


def timed_trainer_class(timers):
    """GRPOTrainer with its generation timed (TRL generates inside the training step)."""
    from trl import GRPOTrainer

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate(self, prompts):
            began = time.monotonic()
            try:
                return super()._generate(prompts)
            finally:
                timers["generation"] = timers.get("generation", 0.0) + time.monotonic() - began

    return TimedGRPOTrainer


def table_row(r):
    rewards = " ".join("." if x is None else "%+d" % x for x in r["rewards"])
    mean = "-" if r["reward_mean"] is None else "%+.2f" % r["reward_mean"]
    s = r["seconds"]
    return "%4d  %-22s %-16s %6s  %10.3g  %6.1f %6.1f %6.1f %6.1f %7.1f" % (
        r["step"], r["task"][:22], rewards, mean, r["loss"], s["generation"], s["reward"],
        s["forward_backward"], s["optimizer"], s["step"])


TABLE_HEAD = "step  task                   rewards            mean        loss   gen_s  rew_s   fb_s  opt_s  step_s"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def weight_change(model, checkpoint):
    """How training moved the weights: each tensor of the trained model against the checkpoint's file."""
    import torch
    from safetensors import safe_open
    changed, largest, total = [], 0.0, 0
    with safe_open(os.path.join(checkpoint, "model.safetensors"), "pt") as f:
        state = model.state_dict()
        for name in f.keys():
            before, after = f.get_tensor(name), state[name].detach().to("cpu", torch.float32)
            total += 1
            if not torch.equal(before, after):
                changed.append(name)
                largest = max(largest, (after - before).abs().max().item())
    return {"tensors": total, "changed": len(changed), "max_abs_change": largest, "example": changed[:1]}


def machine():
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 platform.processor())
    mem = next((int(line.split()[1]) // 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal")), None)
    return {"nproc": os.cpu_count(), "cpu": model, "memory_mib": mem, "platform": platform.platform()}


def load_policy(checkpoint, seed, threads):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    # A closing fence ends a sample too (Gemma's turn and document ends are there already): the
    # answer is complete, and TRL's mask then stops at the fence.
    fences = [tokenizer.convert_tokens_to_ids(t) for t in (FENCE, "\u2581" + FENCE)]
    ends = model.generation_config.eos_token_id
    ends = [ends] if isinstance(ends, int) else list(ends or [])
    model.generation_config.eos_token_id = ends + [i for i in fences if i is not None and i not in ends]
    return model, tokenizer


def dataset_of(tasks, tokenizer):
    from datasets import Dataset
    rows = []
    for path in tasks:
        source = open(path).read()
        prompt, prefill = prompt_of(source, tokenizer)
        rows.append({"prompt": prompt, "prefill": prefill, "task_name": os.path.basename(path),
                     "task_source": source})
    return Dataset.from_list(rows)


def grpo_config(args, scratch):
    from trl import GRPOConfig
    return GRPOConfig(
        output_dir=scratch, use_cpu=True, bf16=False, fp16=False, seed=args.seed,
        max_steps=args.steps, per_device_train_batch_size=args.generations, num_generations=args.generations,
        gradient_accumulation_steps=1, max_completion_length=args.max_completion_tokens,
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        temperature=args.temperature, top_p=1.0, top_k=0, beta=0.0, logging_steps=1,
        logging_nan_inf_filter=False, save_strategy="no", report_to="none", disable_tqdm=True,
        dataloader_num_workers=0, disable_dropout=True)


def run(args):
    """Trains; returns (summary, trainer). The summary is also DIR/summary.json."""
    import torch
    import transformers
    import trl
    from transformers import PrinterCallback
    from anvil.rl import local_checkpoint
    began, stamp = time.monotonic(), datetime.datetime.now(datetime.timezone.utc)
    os.makedirs(args.out, exist_ok=True)
    log_path = os.path.join(args.out, "log.jsonl")
    open(log_path, "w").close()
    checkpoint = args.checkpoint or local_checkpoint.make_checkpoint()
    tasks = task_files(args.tasks)
    health = asyncio.run(Client(args.serve).health())
    model, tokenizer = load_policy(checkpoint, args.seed, args.threads)
    reward, timers = AnvilReward(args.serve), {}
    with tempfile.TemporaryDirectory(prefix="anvil-grpo-") as scratch:  # the trainer's output_dir: nothing is saved
        trainer = timed_trainer_class(timers)(
            model=model, reward_funcs=[reward], args=grpo_config(args, scratch),
            train_dataset=dataset_of(tasks, tokenizer), processing_class=tokenizer,
            callbacks=[make_callback(reward, log_path, timers)])
        trainer.remove_callback(PrinterCallback)  # its dict a step; the table says what matters
        print(TABLE_HEAD, flush=True)
        train_began = time.monotonic()
        trainer.train()
        train_seconds = time.monotonic() - train_began
    steps = [json.loads(line) for line in open(log_path)]
    marker = json.load(open(os.path.join(checkpoint, local_checkpoint.MARKER)))
    summary = {
        "model": "Gemma 3 270M (%s, dequantized to float32)" % os.path.basename(marker.get("gguf", "?")),
        "checkpoint": checkpoint, "gguf_sha256": marker.get("sha256"),
        "weights_sha256": sha256_file(os.path.join(checkpoint, "model.safetensors")),
        "training": "full fine-tuning, float32, CPU", "trainer": "trl.GRPOTrainer",
        "versions": {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
                     "python": platform.python_version()},
        "serve": {"url": args.serve, "health": health}, "protocol": PROTOCOL["protocol"],
        "tasks": [{"name": os.path.basename(t), "path": os.path.abspath(t), "sha256": sha256_file(t)} for t in tasks],
        "steps": len(steps), "generations": args.generations, "max_completion_tokens": args.max_completion_tokens,
        "optimizer": str(getattr(trainer.args.optim, "value", trainer.args.optim)),
        "learning_rate": args.lr, "temperature": args.temperature, "seed": args.seed, "beta": 0.0,
        "torch_threads": torch.get_num_threads(),
        "samples": sum(len(s["rewards"]) for s in steps),
        "evaluations": sum(e is not None for s in steps for e in s["evaluations"]),
        "no_code": sum(s["no_code"] for s in steps), "errors": sum(s["errors"] for s in steps),
        "weights": weight_change(trainer.model, checkpoint),
        "train_seconds": round(train_seconds, 1), "wall_seconds": round(time.monotonic() - began, 1),
        "machine": machine(), "date": stamp.isoformat(timespec="seconds"),
        "command": "python -m anvil.rl.grpo_cpu " + " ".join(args.argv),
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return summary, trainer


def parse(argv):
    ap = argparse.ArgumentParser(prog="python -m anvil.rl.grpo_cpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", required=True, help="anvil serve's URL (http://127.0.0.1:PORT)")
    ap.add_argument("--tasks", nargs="+", required=True, help="task files or directories of them")
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps (one task each)")
    ap.add_argument("--out", required=True, help="where log.jsonl and summary.json go")
    ap.add_argument("--generations", type=int, default=4, help="samples per task (GRPO's group)")
    ap.add_argument("--max-completion-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e-6, help="AdamW's learning rate (constant)")
    ap.add_argument("--temperature", type=float, default=0.7)
    # One thread: decoding reads the weights once a token (memory-bound), and two threads on two cores
    # wait for each other whenever another process takes a core. 16 tokens of 4 samples: 1 thread
    # 5.6-6.9 s, 2 threads 6-23 s on a quiet host and 19-45 s beside other busy processes.
    ap.add_argument("--threads", type=int, default=1, help="torch's threads (0: one a core)")
    ap.add_argument("--checkpoint", help="a Hugging Face checkpoint (default: anvil.rl.local_checkpoint's)")
    args = ap.parse_args(argv)
    args.argv = list(argv)
    return args


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    summary, _ = run(args)
    print("%d steps, %d samples (%d evaluated, %d without code, %d errors); %d of %d weight tensors changed; "
          "wall %.0f s" % (summary["steps"], summary["samples"], summary["evaluations"], summary["no_code"],
                           summary["errors"], summary["weights"]["changed"], summary["weights"]["tensors"],
                           summary["wall_seconds"]))
    losses = [s["loss"] for s in map(json.loads, open(os.path.join(args.out, "log.jsonl")))]
    return 0 if losses and all(x is not None and math.isfinite(x) for x in losses) else 1


if __name__ == "__main__":
    sys.exit(main())
