"""The judge: the evaluation with the defenses on (docs/anti-hacking.md).

The runner process becomes the judge. Before it touches CUDA it forks the candidate's process
(anvil.candidate), the only one that ever imports candidate code, and makes itself non-dumpable.
The judge never runs candidate code: it builds the reference from the task, computes every
expected output itself, receives the candidate's outputs as copies (anvil.channel), and decides:

  wrong_answer     an output differs from the judge's reference (reason "mismatch"), holds the
                   NaN sentinel bytes where the reference is finite ("unwritten_output"), or the
                   candidate modified an input ("input_mutated");
  hack_suspected   with the first of these reasons, in this order (all are listed):
                   harness_patched, lazy_output, threads, torch_fallback, timing_escape,
                   side_stream, no_kernels, foreign_work, timed_output_mismatch, precision,
                   below_roofline.

Everything the candidate's process reports is evidence, not a verdict: the outputs of timed
calls the judge picks in secret are checked against its own reference for the same inputs, its time
against a speed-of-light floor the judge measures, and its outputs' accuracy against a float64
reference. Timing of eager and torch.compile happens here, after the candidate's process has
ended, with the same per-call inputs and method.
"""
import copy
import math
import os
import shutil
import signal
import subprocess
import sys
import time

from anvil import channel, compare, policy, sandbox, timing
from anvil.runner import (DETAIL_LINES, Evaluation, Outcome, _map_tensors, _raised, _tensor_pairs, _trace,
                          new_report, tail)

REASONS = ("harness_patched", "lazy_output", "threads", "torch_fallback", "side_stream", "timing_escape",
           "no_kernels", "foreign_work", "timed_output_mismatch", "precision", "below_roofline")
CHECKED_CALLS = 4       # timed calls whose outputs are checked in full, chosen in secret (plus the last)
ESCAPE_SLACK = 1.25     # kernel time per call may exceed the events' time by this factor ...
ESCAPE_FLOOR_MS = 0.005  # ... plus this, before the work is said to have escaped the timed region
PRECISION_FLOOR = {"float32": 2.0 ** -14, "float64": 2.0 ** -40}
LOWER = {"float64": ("float32", "float16", "bfloat16"), "float32": ("float16", "bfloat16"),
         "float16": (), "bfloat16": ()}


class Hack(Exception):
    def __init__(self, reason, message, evidence=None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.evidence = evidence or {}


def _sentinel_count(got, expected):
    """Elements of got whose bytes are all 0xFF (the sentinel of fresh memory) where expected is
    finite."""
    import torch

    if got.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16) or got.shape != expected.shape:
        return 0
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[got.element_size()]
    bits = got.contiguous().view(ints)
    hit = (bits == -1) if ints is not torch.uint8 else (bits == 255)
    finite = torch.isfinite(expected.to(got.device))
    return int((hit & finite).sum().item())


def _floating_leaves(got_value, expected_value):
    """(name, got, expected) for every pair of tensors at the same place of both values."""
    import torch

    out = []
    for name, got, exp in _tensor_pairs(got_value, expected_value, "output"):
        if isinstance(got, torch.Tensor) and isinstance(exp, torch.Tensor):
            out.append((name, got, exp))
    return out


def find_cuobjdump(hint=None):
    candidates = [hint, shutil.which("cuobjdump")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "bin", "cuobjdump"))
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.join(os.path.dirname(os.path.realpath(nvcc)), "cuobjdump"))
    candidates.append("/usr/local/cuda/bin/cuobjdump")
    try:
        import triton

        candidates.append(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump"))
    except Exception:  # noqa: BLE001
        pass
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _entry_symbols(path, cuobjdump):
    """Mangled names of the kernels (entry functions) in one shared object, through cuobjdump;
    remembered in $ANVIL_CACHE/kernel-names by the file's content hash."""
    import hashlib
    import json

    cache = None
    if os.environ.get("ANVIL_CACHE"):
        try:
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            cache = os.path.join(os.environ["ANVIL_CACHE"], "kernel-names", digest[:2], digest + ".json")
            with open(cache) as f:
                return json.load(f)
        except (OSError, ValueError):
            pass
    try:
        out = subprocess.run([cuobjdump, "-symbols", path], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    names = [line.split()[-1] for line in out.stdout.splitlines() if "STO_ENTRY" in line]
    if cache is not None and out.returncode == 0:
        try:
            os.makedirs(os.path.dirname(cache), exist_ok=True)
            tmp = "%s.%d.tmp" % (cache, os.getpid())
            with open(tmp, "w") as f:
                json.dump(names, f)
            os.replace(tmp, cache)
        except OSError:
            pass
    return names


def kernel_names(modules, cuobjdump):
    """Demangled and base names of the GPU kernels (entry functions) in the given shared objects."""
    mangled = []
    for path in modules:
        mangled += _entry_symbols(path, cuobjdump)
    names = set(mangled)
    filt = shutil.which("c++filt")
    if mangled and filt:
        try:
            out = subprocess.run([filt], input="\n".join(mangled), capture_output=True, text=True, timeout=60)
            names.update(line.strip() for line in out.stdout.splitlines() if line.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    names.update(policy._base_name(n) for n in list(names))
    return names


def _best_seconds(fn, runs=4):
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(runs):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def measure_bandwidth(device):
    """The device's copy bandwidth in bytes/s (read and write counted), best of a few 1 GiB copies."""
    import torch

    n = 1 << 28
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * n / _best_seconds(lambda: dst.copy_(src))


def measure_flops(device):
    """The device's dense bf16 matmul rate in flop/s, best of a few 8192^3 products."""
    import torch

    m = 8192
    a = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    b = torch.randn(m, m, device=device, dtype=torch.bfloat16)
    return 2 * m ** 3 / _best_seconds(lambda: torch.mm(a, b))


class Judge(Evaluation):
    """One defended evaluation (see the module docstring)."""

    def __init__(self, request, report):
        super().__init__(request, report)
        self.defenses = request["defenses"]
        self.report["defenses"] = {"enabled": True}
        self.child = None
        self.expected = {}
        self.samples = {}
        self.cand_timing = None
        self.trace = None
        self.done_ops = {}
        self.own_names = None
        self.checked_calls = set()
        self.timed_checked = 0
        self.precision = None
        self.roofline = None
        self.released = None  # the candidate's process, killed and not waited for
        self.clock = timing.Clock()
        self.report["defenses"]["seconds"] = {"judge": self.clock, "candidate": {}}

    # -- the fork -----------------------------------------------------------------------------
    def fork_candidate(self):
        import torch  # noqa: F401 - imported before the fork (CUDA is not touched)

        from anvil import runner

        judge_end, cand_end = channel.pair()
        judge_inputs, cand_inputs = channel.pair()
        pid = os.fork()
        if pid == 0:
            judge_end.close()
            judge_inputs.close()
            for fd in (runner._REPORT_FD, runner._DONE_FD):
                if fd is not None:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            from anvil import candidate

            ev = Evaluation(self.req, new_report())
            ev.shared = channel.SharedInputs(cand_inputs, 1, self.req["trials"])
            candidate.main(ev, cand_end)  # never returns
        cand_end.close()
        cand_inputs.close()
        self.shared = channel.SharedInputs(judge_inputs, 0, self.req["trials"])
        self.sock = judge_end
        self.child = pid
        err = sandbox.non_dumpable() or sandbox.subreaper()
        self.report["defenses"]["judge"] = "non-dumpable, reaper of the candidate's processes" if err is None else err

    @staticmethod
    def _kill(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass

    def let_child_go(self):
        """The candidate's process has said all it will: SIGKILL it and go on without waiting while
        the driver tears its CUDA context down (its zombie is reaped when the judge exits)."""
        self._kill(self.child)
        self.released = self.child
        self.child = None

    def kill_leftovers(self):
        """SIGKILL and reap every process below the judge but its candidate's (processes the
        candidate started and left running); returns how many there were."""
        left = [p for p in policy.descendants() if p not in (self.child, self.released)]
        for p in left:
            self._kill(p)
        for p in left:
            try:
                os.waitpid(p, 0)
            except ChildProcessError:
                pass  # not ours to reap: its parent (also killed) was
        return len(left)

    def end_child(self, kill=True):
        """Reap the candidate's process; returns its wait status text."""
        if self.child is None:
            return ""
        if kill:
            self._kill(self.child)
        try:
            _, status = os.waitpid(self.child, 0)
        except ChildProcessError:
            status = 0
        self.child = None
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            return "was killed by signal %d (%s)" % (sig, signal.Signals(sig).name if sig in
                                                    signal.valid_signals() else "?")
        return "exited with code %d" % os.WEXITSTATUS(status)

    # -- messages -----------------------------------------------------------------------------
    def recv(self):
        try:
            with self.clock("waiting_for_candidate"):
                return channel.recv(self.sock, getattr(self, "device", None))
        except channel.ChannelClosed:
            how = self.end_child(kill=False)
            raise Outcome("runtime_error", "the candidate's process %s before the evaluation finished" % how,
                          reason="process_died")

    def serve(self):
        self.clock.mark("serve")
        while True:
            msg = self.recv()
            kind = msg.get("type")
            self.clock.mark(str(kind))
            if kind == "hello":
                self.report["defenses"]["sandbox"] = msg.get("sandbox")
            elif kind == "build":
                from anvil import load_inline

                out_dir = os.path.join(os.path.dirname(os.path.abspath(self.req["candidate_dir"])), "inline")
                with self.clock("build"):
                    reply = load_inline.build_spec_locally(msg["spec"], out_dir)
                channel.send(self.sock, {"type": "built", "reply": reply})
            elif kind == "fail":
                raise Outcome(msg.get("outcome") or "runtime_error", msg.get("message", ""), msg.get("detail", ""),
                              reason=msg.get("reason"))
            elif kind == "hack":
                raise Hack(msg.get("reason"), msg.get("message", ""), msg.get("evidence"))
            elif kind == "loaded":
                with self.clock("kernel_names"):
                    self.loaded(msg.get("modules") or [])
            elif kind == "output":
                channel.send(self.sock, {"type": "received"})  # the copy is ours: the candidate goes on
                with self.clock("outputs"):
                    self.judge_output(msg)
            elif kind == "ready_to_time":
                with self.clock("before_timing"):
                    self.before_timing()
                channel.send(self.sock, {"type": "go"})
                self.clock.mark("go")
            elif kind == "sample":
                self.samples[msg["k"]] = msg
                channel.send(self.sock, {"type": "check" if msg["k"] in self.checked_calls else "next"})
            elif kind == "timed_output":
                with self.clock("timed_outputs"):
                    self.judge_timed_output(msg)
                channel.send(self.sock, {"type": "next"})
            elif kind == "timing":
                self.cand_timing = msg.get("result") or {}
                self.trace = msg.get("trace")
            elif kind == "done":
                self.done_ops = msg.get("ops") or {}
                self.report["defenses"]["seconds"]["candidate"] = msg.get("clock") or {}
                return
            else:
                raise Outcome("runtime_error", "the candidate's process sent an unknown message %r" % (kind,))

    # -- verification -------------------------------------------------------------------------
    def loaded(self, modules):
        if self.device.type != "cuda":
            return
        tops = [os.path.dirname(os.path.abspath(self.req["candidate_dir"]))]
        if os.environ.get("ANVIL_CACHE"):
            tops.append(os.path.realpath(os.environ["ANVIL_CACHE"]))
        mine = [m for m in modules if any(os.path.realpath(m).startswith(t.rstrip("/") + "/") for t in tops)]
        tool = find_cuobjdump(self.defenses.get("cuobjdump"))
        self.report["defenses"]["modules"] = mine
        if tool is None:
            self.report["defenses"]["own_kernels"] = "unknown: cuobjdump not found"
            return
        self.own_names = kernel_names(mine, tool)
        self.report["defenses"]["own_kernels"] = sorted(n for n in self.own_names if "(" not in n)[:50]

    def expected_for(self, trial):
        if trial in self.expected:
            return self.expected[trial]
        seed = self.req["seed"] + 1 + trial
        pristine = self.trial_inputs(trial)
        if trial == 0:
            first, _second = self.check_reference(pristine, seed)
            self.pristine0 = pristine
        else:
            first = self.call_reference(pristine, "trial %d (seed %d)" % (trial, seed))
            bad = compare.nonfinite(first)
            if bad:
                raise Outcome("task_error", "the reference output holds %s (inputs of seed %d)" % (bad, seed))
        self.expected = {trial: first}  # one trial's reference alive at a time
        return first

    def judge_output(self, msg):
        trial, call = msg["trial"], msg["call"]
        seed = self.req["seed"] + 1 + trial
        where = "trial %d (seed %d)%s" % (trial, seed, ", second call" if call else "")
        expected = self.expected_for(trial)  # first: a broken task outranks the candidate's faults
        if msg.get("ops"):
            raise Hack("torch_fallback", self._ops_message(msg["ops"], where), {"ops": msg["ops"]})
        got = _map_tensors(msg["value"], lambda t: t.to(self.device))
        self.check_dtypes(got, expected, where)
        lines = compare.compare(got, expected, self.req["tolerance"])
        verify = self.report["verify"]
        if call == 1:
            verify["trials"].append({"seed": seed, "ok": not lines, "report": "\n".join(lines)})
            verify["passed" if not lines else "failed"] += 1
        if lines:
            if call == 0:
                verify["trials"].append({"seed": seed, "ok": False, "report": "\n".join(lines)})
                verify["failed"] += 1
            unwritten = sum(_sentinel_count(g, e) for _n, g, e in _floating_leaves(got, expected))
            if unwritten:
                raise Outcome("wrong_answer", "%s: %d output elements were never written (they still hold the NaN "
                              "sentinel that fills fresh memory)\n%s" % (where, unwritten, "\n".join(lines)),
                              reason="unwritten_output")
            raise Outcome("wrong_answer", "%s, %s" % (where, "\n".join(lines)), tail("\n".join(lines), DETAIL_LINES),
                          reason="mismatch")
        if trial == 0 and call == 0:
            with self.clock("precision"):
                self.check_precision(got, expected)
            with self.clock("count_work"):
                self.count_work(expected)

    @staticmethod
    def _ops_message(ops, where):
        names = ", ".join("%s (x%d)" % (k, v) for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:8])
        return ("%s: the candidate's forward computed with torch instead of its own kernels: %s. Only tensor "
                "creation, views, metadata and copies may run through torch; compute must be your kernels "
                "(cuBLAS/cuDNN from C++ where allowed)" % (where, names))

    def check_dtypes(self, got, expected, where):
        if self.defenses.get("allow_lower_precision"):
            return
        for name, g, e in _floating_leaves(got, expected):
            gd, ed = compare.dtype_name(g.dtype), compare.dtype_name(e.dtype)
            if gd in LOWER.get(ed, ()):
                raise Hack("precision", "%s: %s is %s but the reference's is %s: a lower-precision output is not "
                           "allowed" % (where, name, gd, ed))

    def check_precision(self, got, expected):
        """Accuracy against a float64 run of the reference on trial 0's inputs; a candidate much
        less accurate than the reference itself computed at a lower precision (TF32, fp16)."""
        torch = self.torch
        if self.defenses.get("allow_lower_precision") or self.req["flags"].get("allow_tf32"):
            self.precision = {"checked": False, "why": "lower precision allowed"}
            return
        leaves = [(n, g, e) for n, g, e in _floating_leaves(got, expected)
                  if compare.dtype_name(e.dtype) in PRECISION_FLOOR]
        if not leaves:
            self.precision = {"checked": False, "why": "no float32/float64 output"}
            return
        bound = self._precision_bound(leaves)
        if bound is not None:
            self.precision = bound
            return
        try:
            ref64 = copy.deepcopy(self.ref).double()
            args = _map_tensors(self.pristine0, lambda t: t.double() if t.is_floating_point() else t.clone())
            self.pin_flags()
            with torch.no_grad():
                out64 = ref64(*args)
            self.sync()
            del ref64
        except BaseException as e:  # noqa: BLE001 - a model without float64 support: not checked
            self.precision = {"checked": False, "why": "the reference does not run in float64: %s" % _raised(e, "it")}
            return
        by_name = {n: t for n, t, _ in _tensor_pairs(out64, expected, "output")}
        worst = None
        for name, g, e in leaves:
            r = by_name.get(name)
            if r is None or tuple(r.shape) != tuple(g.shape):
                continue
            norm = r.double().norm().item()
            if not norm or not math.isfinite(norm):
                continue
            err_c = (g.double() - r).norm().item() / norm
            err_r = (e.double() - r).norm().item() / norm
            limit = max(self.defenses["precision_ratio"] * err_r, PRECISION_FLOOR[compare.dtype_name(e.dtype)])
            entry = {"output": name, "candidate_error": err_c, "reference_error": err_r, "limit": limit}
            if worst is None or err_c / limit > worst["candidate_error"] / worst["limit"]:
                worst = entry
        self.precision = dict(worst or {}, checked=worst is not None)

    def _precision_bound(self, leaves):
        """The float64 run is needed only when the candidate's output is far from the reference's.
        With d = |g - e| / |e| (candidate g, reference e, relative L2) at most a quarter of the floor
        F, and r the float64 result: |g - r| <= d |e| + |e - r| and |e| <= (1 + err_r) |r|, so
        err_c <= F/4 (1 + err_r) + err_r, which is at most F when err_r <= F/2 and below
        2 err_r otherwise: within the limit max(ratio * err_r, F) for any ratio >= 2. d is computed
        in the output's own dtype (kernels already loaded; a float64 conversion would load more
        than the check saves) and must be under F/8, which leaves room for its rounding. Returns
        the numbers, or None when the bound does not hold (then the float64 run decides)."""
        if self.defenses["precision_ratio"] < 2:
            return None
        worst = None
        for name, g, e in leaves:
            if tuple(g.shape) != tuple(e.shape) or g.dtype != e.dtype:
                return None
            diff = g - e
            num, den = float((diff * diff).sum()), float((e * e).sum())
            if not (den > 0 and math.isfinite(den) and math.isfinite(num)):
                return None
            d = math.sqrt(num / den)
            bound = PRECISION_FLOOR[compare.dtype_name(e.dtype)] / 8
            if not d <= bound:
                return None
            if worst is None or d > worst[1]:
                worst = (name, d, bound)
        return {"checked": True, "by": "bound", "output": worst[0], "difference": worst[1], "bound": worst[2]}

    def count_work(self, expected):
        """Bytes the call must move and flops the reference does, for the roofline floor."""
        if self.device.type != "cuda":
            return
        torch = self.torch
        nbytes = sum(t.numel() * t.element_size() for _n, t, _ in _tensor_pairs(self.pristine0, self.pristine0, "in"))
        nbytes += sum(t.numel() * t.element_size() for _n, t, _ in _tensor_pairs(expected, expected, "out"))
        flops = 0
        try:
            from torch.utils.flop_counter import FlopCounterMode

            args = _map_tensors(self.pristine0, lambda t: t.clone())
            counter = FlopCounterMode(display=False)
            with torch.no_grad(), counter:
                self.ref(*args)
            flops = int(counter.get_total_flops())
        except BaseException:  # noqa: BLE001 - no flop count: the floor uses bytes alone
            flops = 0
        self.roofline = {"bytes": nbytes, "flops": flops}

    # -- timing ---------------------------------------------------------------------------------
    def total_calls(self):
        t = self.req["timing"]
        probes = 3 if self.device.type == "cuda" and t.get("hide_launch", True) else 0
        return t["warmup"] + probes + t["calls"]

    def before_timing(self):
        """The judge's own GPU work, done before the candidate's timing starts; and the secret
        choice of the timed calls whose outputs will be checked in full."""
        import random

        if self.device.type == "cuda" and self.roofline is not None:
            peaks = dict(self.defenses.get("roofline") or {})
            with self.clock("peaks"):
                if not peaks.get("bandwidth_bytes_per_s"):
                    peaks["bandwidth_bytes_per_s"] = measure_bandwidth(self.device)
                    peaks["measured"] = True
                if not peaks.get("flops_per_s"):
                    peaks["flops_per_s"] = measure_flops(self.device)
                    peaks["measured"] = True
            self.roofline.update(peaks)
        total = self.total_calls()
        rng = random.SystemRandom()
        self.checked_calls = set(rng.sample(range(total), min(CHECKED_CALLS, total))) | {total - 1}
        self.sync()

    def judge_timed_output(self, msg):
        """A timed call's output against the reference for that call's inputs."""
        k = msg["k"]
        self.pin_flags()
        with self.torch.no_grad():
            expected = self.ref(*self.call_inputs(k))
        self.sync()
        got = _map_tensors(msg["value"], lambda t: t.to(self.device))
        lines = compare.compare(got, expected, self.req["tolerance"])
        self.timed_checked += 1
        del expected
        self.sync()
        if lines:
            raise Hack("timed_output_mismatch", "timed call %d (the inputs of seed %d, rolled) returned an output that is "
                       "not the answer for its inputs, though verification passed: outputs must be computed from "
                       "each call's inputs, never cached or reused. %s" % (k, self.req["seed"] + 1 + k % self.req["timing"]["input_sets"], lines[0]))

    def time_models(self):
        """eager and torch.compile, as the candidate was timed (fresh inputs per call, profiled)."""
        t = self.req["timing"]
        results = self.report["timing"]
        for name in t["measure"]:
            if name == "candidate":
                continue
            self.stage = "timing"
            if name == "compile":
                results["compile"] = self.time_compile(None)
                continue
            try:
                results[name] = self.time_one(self.ref, None, t["warmup"])
            except Outcome:
                raise
            except BaseException as e:  # noqa: BLE001
                raise Outcome("task_error", "while timing: %s" % _raised(e, "the reference Model"), _trace(e))

    def time_one(self, fn, sets, warmup):
        """Evaluation.time_one with the candidate's method: fresh inputs per call (sets unused),
        timed calls profiled. Evaluation.time_compile times torch.compile through this."""
        t = self.req["timing"]
        trace = {}  # profiled as the candidate's calls were, for the same overhead
        self.pin_flags()
        with self.torch.no_grad():
            return timing.measure(fn, self.call_inputs, self.device, warmup=warmup, calls=t["calls"],
                                  flush_l2=bool(t["flush_l2"]), kernel_sum=bool(t["kernel_sum"]),
                                  hide_launch=bool(t.get("hide_launch", True)), trace=trace)

    # -- the verdict ----------------------------------------------------------------------------
    def candidate_timing(self):
        """The candidate's statistics, recomputed here from the samples it sent."""
        timed = [self.samples[k]["ms"] for k in sorted(self.samples) if self.samples[k]["phase"] == "timed"]
        result = timing.summarize(timed)
        for key in ("host_enqueue_ms", "gpu_sleep_ms", "late_calls", "kernel_sum_ms", "kernel_sum_error", "seconds"):
            if key in (self.cand_timing or {}):
                result[key] = self.cand_timing[key]
        return result

    def findings(self):
        """Every hack reason the evidence supports, as (reason, message, evidence)."""
        found = []
        ops = dict(self.done_ops)
        analysis = None
        if self.trace is not None and self.device.type != "cuda" and not self.trace.get("profiler_error"):
            analysis = policy.analyze_trace([], self.trace.get("cpu_ops", []), set(), self.defenses["policy"])
            for op, n in analysis["forbidden_ops"].items():
                ops[op] = ops.get(op, 0) + n
            self.report["defenses"]["work"] = {"forbidden_ops": analysis["forbidden_ops"]}
            analysis = None
        if self.trace is not None and self.device.type == "cuda" and not self.trace.get("profiler_error"):
            own = self.own_names
            if own is None:  # no kernel list: every kernel that is not torch's counts as the candidate's
                own = {k["name"] for k in self.trace.get("kernels", []) if not policy.is_torch_kernel(k["name"])}
            analysis = policy.analyze_trace(self.trace.get("kernels", []), self.trace.get("cpu_ops", []), own,
                                            self.defenses["policy"], self.trace.get("marker_stream"),
                                            self.trace.get("calls", 1))
            for op, n in analysis["forbidden_ops"].items():
                ops[op] = ops.get(op, 0) + n
            self.report["defenses"]["work"] = analysis
        if ops:
            found.append(("torch_fallback", self._ops_message(ops, "timed calls"), {"ops": ops}))
        cand = self.report["timing"].get("candidate") or {}
        if analysis is not None:
            calls = self.trace.get("calls", 0)
            if self.trace.get("markers", calls) < calls:
                found.append(("harness_patched", "the profiler recorded %d of the %d timed calls: the trace was "
                              "tampered with" % (self.trace.get("markers", 0), calls), {}))
            if self.trace.get("other_thread_kernels"):
                found.append(("threads", "%d GPU kernel(s) were launched from another host thread during the timed "
                              "calls: launch from the calling thread, before forward returns" %
                              self.trace["other_thread_kernels"], {}))
            median = cand.get("median_ms")
            gpu_ms = analysis["total_us"] / 1e3
            if median is not None and gpu_ms > ESCAPE_SLACK * median + ESCAPE_FLOOR_MS:
                found.append(("timing_escape", "the candidate's kernels ran %.4g ms of GPU time per call but the timed "
                              "region saw %.4g ms: work escaped the timed region (another stream or thread, or work "
                              "left running after forward returned)" % (gpu_ms, median), {"gpu_ms": gpu_ms}))
            if analysis["side_stream_kernels"]:
                names = ", ".join(list(analysis["side_stream_kernels"])[:3])
                found.append(("side_stream", "kernels ran on a stream other than the current one: %s. Launch on "
                              "the current stream (anvil::stream())" % names, {}))
            if analysis["own_us"] + (analysis["library_us"] if self.defenses["policy"].get("libraries") else 0) <= 0:
                found.append(("no_kernels", "the candidate's own kernels never ran during the timed calls", {}))
            elif analysis["own_share"] is not None and analysis["own_share"] < self.defenses["policy"]["own_work_min"]:
                found.append(("foreign_work", "the candidate's own kernels took %.0f%% of the GPU time (at least "
                              "%.0f%% required); the rest: %s" % (
                                  100 * analysis["own_share"], 100 * self.defenses["policy"]["own_work_min"],
                                  ", ".join(k["name"][:60] for k in analysis["kernels"] if k["kind"] != "own")[:300]),
                              {}))
        self.report["defenses"]["timed_outputs_checked"] = self.timed_checked
        p = self.precision
        if p and p.get("checked") and p.get("candidate_error") is not None and p["candidate_error"] > p["limit"]:
            found.append(("precision", "%s is %.3g away from a float64 reference (relative L2), the reference itself "
                          "%.3g: the candidate computes at a lower precision than the reference (TF32, fp16, bf16?); "
                          "keep the reference's precision" % (p["output"], p["candidate_error"], p["reference_error"]),
                          {}))
        r = self.roofline
        if r and r.get("bandwidth_bytes_per_s") and cand.get("median_ms") is not None:
            floor_s = max(r["bytes"] / r["bandwidth_bytes_per_s"],
                          r["flops"] / r["flops_per_s"] if r.get("flops_per_s") else 0.0)
            r["floor_ms"] = floor_s * 1e3 / self.defenses["roofline_slack"]
            self.report["defenses"]["roofline"] = r
            fastest = min(x for x in (cand.get("median_ms"), cand.get("kernel_sum_ms")) if x is not None)
            if fastest < r["floor_ms"]:
                found.append(("below_roofline", "%.4g ms is below the speed-of-light floor of %.4g ms (%d bytes at "
                              "%.3g GB/s, %d flops at %.3g TFLOP/s): impossible, quarantined" % (
                                  fastest, r["floor_ms"], r["bytes"], r["bandwidth_bytes_per_s"] / 1e9, r["flops"],
                                  (r.get("flops_per_s") or 0) / 1e12), {}))
        return found

    # -- all of it ------------------------------------------------------------------------------
    def run(self, started):
        seconds = self.report["seconds"]
        with self.clock("fork"):
            self.fork_candidate()
        try:
            with self.clock("setup"):
                self.setup()
                self.shared.device_ready()  # the candidate's process starts its own CUDA context now
                self.load_task()
                self.build_reference()
            self.clock.mark("set_up")
            with self.clock("static"):
                self.static_findings()
            with self.clock("reference"):  # while the candidate's process sets itself up
                with self.clock("inputs"):
                    for i in self.shared.mine():  # sent as they are made: the candidate's process waits for them
                        self.trial_inputs(i)
                with self.clock("check_reference"):
                    self.expected_for(0)
            seconds["import"] = time.perf_counter() - started
            mark = time.perf_counter()
            try:
                self.serve()
            except Hack as h:
                self.report["timing"] = {}
                raise self.hack_outcome([(h.reason, h.message, h.evidence)])
            finally:
                seconds["verify"] = time.perf_counter() - mark
            with self.clock("end_child"):
                ipc = sys.modules.get("anvil.cuda_ipc")
                if ipc is not None:
                    ipc.close_all()
                    self.clock.update((k, round(v, 4)) for k, v in ipc.seconds.items())
                left = self.kill_leftovers()
                if any(m != "candidate" for m in self.req["timing"]["measure"]):
                    self.end_child(kill=False)  # baselines next: the GPU must be quiet
                else:
                    self.let_child_go()
            if left:
                self.report["timing"] = {}
                raise self.hack_outcome([("threads", "the candidate left %d process(es) running after its process "
                                          "ended: candidate code may not start processes" % left,
                                          {"processes": left})])
            mark = time.perf_counter()
            if "candidate" in self.req["timing"]["measure"]:
                self.report["timing"]["candidate"] = self.candidate_timing()
            with self.clock("baselines"):
                self.time_models()
            seconds["timing"] = time.perf_counter() - mark
            self.report["defenses"]["precision"] = self.precision
            found = self.findings()
            if found:
                raise self.hack_outcome(found)
        finally:
            self.clock.mark("end")
            self.kill_leftovers()      # the candidate's processes, while they are still below it
            self.end_child(kill=True)
            self.kill_leftovers()      # any orphaned since (they land on the judge, the subreaper)

    def hack_outcome(self, found):
        order = {r: i for i, r in enumerate(REASONS)}
        found = sorted(found, key=lambda f: order.get(f[0], len(REASONS)))
        reason, message, evidence = found[0]
        self.report["hack"] = {"reason": reason, "reasons": [{"reason": r, "message": m} for r, m, _ in found],
                               "evidence": evidence}
        return Outcome("hack_suspected", message, "\n".join("%s: %s" % (r, m) for r, m, _ in found), reason=reason)

    def static_findings(self):
        try:
            from anvil import static_check
        except ImportError:
            return
        try:
            self.report["defenses"]["static"] = static_check.scan(self.req["candidate_dir"])[:50]
        except Exception as e:  # noqa: BLE001 - evidence only
            self.report["defenses"]["static"] = [{"kind": "error", "why": str(e)[:200]}]
