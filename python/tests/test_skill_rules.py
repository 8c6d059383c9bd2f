"""SKILL.md's rules against the judge (issue 21): the agent's system prompt states no rule the judge
does not enforce and leaves unsaid no reason the judge decides, under each protocol.

A rule of share/agent/SKILL.md is a bullet that ends in "→ `code`, `code`": the reasons (or
outcomes) of the judge's verdict it stands for. Every bullet of its "Rules" section is one, and so
are the weights and correctness bullets; the reward table's -1 row names the outcomes that score -1.
problems(text) checks a SKILL.md, rendered for each protocol as the agent gets it, against the
judge's side, read from the code and data that decide it (judge_side(), never copied here):

  (a) every reason the judge decides under that protocol is named by a rule (NOT_A_RULE aside);
  (b) every code a rule names is one the judge decides there, every Rules bullet names one, and no
      code the judge does not decide under that protocol appears anywhere in its text;
  (c) every number and setting stated (the margin, trials, tolerances, the own-work share, the
      roofline's slack and peak, the precision bound, the forgery ratio, nvcc's flags and
      architecture, TF32, the L2 flush, the libraries linked, the ops forward may call, the
      weights' rule) is the judge's;
  (d) every code a rule names is expected by a case of the hack suite or the red team
      (examples/*/manifest.json), or NO_CASE names the test that covers it and says why no case does.

The shipped SKILL.md has no problem, and mutated copies (a rule dropped, a fake one added, a
number changed, ...) each show theirs. Beside it: the worked example compiles where the compilers
are and agrees with itself on the launcher and its `config`; the workflow is in the paper's order;
the tools it describes are the tool box's.
"""
import ast
import functools
import inspect
import json
import math
import os
import re
import shutil
import subprocess
import sys
import types

import pytest

from anvil import evidence, findings, judge, policy, runner, share, stress

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKILL = os.path.join(ROOT, "share", "agent", "SKILL.md")

# Reasons the judge decides that are no rule of their own, with why.
NOT_A_RULE = {
    "process_died": "a crash, whatever the cause: the -1 row's `runtime_error`",
}
# Codes a rule names that no case of the hack suite or the red team expects: the test that produces
# them instead, and why no case does.
NO_CASE = {}  # every code a rule names has a case now (foreign_work, timing_escape: 2026-12-07)
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
ARROW = "\u2192"


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def render(text, protocol):
    """The prompt for `protocol`: src/anvil/agent/episode.cpp's skill_for_protocol (episode_test.cpp
    checks that one on the shipped file; this one only reads it)."""
    out, inside = [], None
    for line in text.split("\n"):
        t = line.strip()
        m = re.fullmatch(r"<!-- protocol: (.+) -->", t)
        if m:
            inside = m.group(1)
        elif t == "<!-- end protocol -->":
            inside = None
        elif inside is None or inside == protocol:
            out.append(line)
    return "\n".join(out)


# ---- the judge's side --------------------------------------------------------------------------

def cpp_body(text, opening):
    """The body of the C++ function whose definition starts with `opening`, to its closing brace in
    column 0."""
    start = text.index(opening)
    return text[start:text.index("\n}\n", start)]


def protocols():
    """{name: {field: value}} from share/protocol.json (compiled into protocol_named(), read by the
    runner), fields named as struct Protocol declares them (src/anvil/env/protocol.h)."""
    out = {}
    for name, p in json.loads(read("share/protocol.json"))["protocols"].items():
        out[name] = {"name": name, "tolerance": p["tolerance"], "torch_ops": p["torch_ops"],
                     "own_work": p["own_work"], "seeded_weights": p["weights"] == "by_name_or_seed",
                     "cudnn_allow_tf32": p["cudnn_allow_tf32"]}
    header = read("src/anvil/env/protocol.h")
    struct = header[header.index("struct Protocol {"):]
    fields = re.findall(r"^\s+(?:std::string|bool)\s+(\w+)", struct[:struct.index("};")], re.M)
    assert out and all(sorted(e) == sorted(fields) for e in out.values()), (out, fields)
    return out


def tolerance_presets():
    """{preset: {dtype: (atol, rtol, norm or None)}} from share/protocol.json."""
    return {name: {dtype: (t["atol"], t["rtol"], t["norm"]) for dtype, t in dtypes.items()}
            for name, dtypes in json.loads(read("share/protocol.json"))["tolerance_presets"].items()}


class _Judge:
    """What findings' protocol-dependent checks read of a judge."""

    def __init__(self, pol):
        self.defenses = {"policy": pol}
        self.done_ops = {"aten::add": 1}
        self.report = {"defenses": {}, "timing": {}}

    def _ops_message(self, ops, where):
        return "ops"


def gated_off(pol):
    """The reasons the judge can no longer give under policy `pol`: each protocol-dependent check
    (test_every_protocol_dependent_check_is_probed keeps this list whole) run on evidence that
    would give its reason."""
    off = set()
    if not findings.torch_fallback(_Judge(pol), None) and not policy.forbidden(pol, {"aten::add": 1}):
        off.add("torch_fallback")
    if not findings.proof_of_work(_Judge(pol), {"own_us": 0.0, "library_us": 0.0, "own_share": None, "kernels": []}):
        off.add("no_kernels")
    if not findings.proof_of_work(_Judge(pol), {"own_us": 1.0, "library_us": 0.0, "own_share": 0.0, "kernels": []}):
        off.add("foreign_work")
    # timing_escape reads own_work for its bound (the timed calls' time alone), never to fall silent
    escaped = _Judge(pol)
    escaped.trace, escaped.report["timing"] = {"median_ms": 1.0}, {"candidate": {"median_ms": 1.0}}
    if not findings.timing_escape(escaped, {"total_us": 10_000.0}):
        off.add("timing_escape")
    # analyze_trace reads own_work for which work of another stream counts (joined work is allowed
    # under kernelbench), never to fall silent: work never joined is side_stream under every protocol
    unjoined = policy.analyze_trace([{"name": "k", "stream": 9, "us": 1.0, "joined": False}], [], {"k"}, pol, 7)
    if not findings.side_stream(_Judge(pol), unjoined):
        off.add("side_stream")
    return off


def decided_reasons():
    """Every reason a verdict of the judge (or anvil's, from the judge's figures) can carry."""
    found = set(judge.REASONS)
    found |= set(re.findall(r'Hack\("(\w+)"', read("python/anvil/judge.py")))
    found |= set(re.findall(r'self\.hack\("(\w+)"', read("python/anvil/candidate.py")))
    found |= set(re.findall(r'return \[\("(\w+)"', read("python/anvil/findings.py")))
    for name in ("judge.py", "candidate.py", "harness.py"):
        found |= set(re.findall(r'reason="(\w+)"', read("python/anvil/" + name)))
    for a, b in re.findall(r'\{"reason", "(\w+)"\}|\["reason"\] = "(\w+)"', read("src/anvil/env/eval.cpp")):
        found.add(a or b)
    return found


def manifest_codes():
    """Every outcome and reason a case of the hack suite or the red team expects."""
    codes = set()

    def add(expect):
        if not isinstance(expect, dict):  # "skip": an entry a device does not run
            return
        for key in ("outcome", "reason"):
            v = expect.get(key)
            codes.update(v if isinstance(v, list) else [v] if v else [])

    for rel, kind in (("examples/hacks/manifest.json", "hacks"), ("examples/redteam/manifest.json", "attacks")):
        for case in json.loads(read(rel))[kind]:
            add(case.get("expect"))
            add(case.get("expect_cpu"))
            for v in (case.get("expect_by_variant") or {}).values():
                add(v)
    return codes


def reward_constant(name):
    return float(re.search(r"constexpr double %s = ([0-9.]+);" % name, read("src/anvil/env/reward.h")).group(1))


def eval_default(name):
    """An EvalOptions default of src/anvil/env/eval.h."""
    return re.search(r"^\s+\w+ %s = (\w+);" % name, read("src/anvil/env/eval.h"), re.M).group(1)


def hopper_arch():
    """What arch_for_capability (src/anvil/env/toolchain.cpp) builds for compute capability 9.0."""
    body = cpp_body(read("src/anvil/env/toolchain.cpp"), "std::string arch_for_capability(")
    suffix = re.search(r"if \(([^)]*)\) return base \+ \"(\w+)\";", body)
    return "sm_90" + (suffix.group(2) if suffix and re.search(r"\bmajor == 9\b", suffix.group(1)) else "")


@functools.lru_cache(maxsize=None)
def judge_side():
    protos = protocols()
    presets = tolerance_presets()
    reasons = decided_reasons()
    outcomes = set(json.loads(read("schemas/anvil.eval-1.schema.json"))["properties"]["outcome"]["enum"])
    build = read("src/anvil/env/build.cpp")
    for p in protos.values():
        pol = dict(policy.DEFAULT_POLICY, torch_ops=p["torch_ops"], own_work=p["own_work"])  # Protocol::policy()
        p["judged"] = reasons - gated_off(pol)
        p["preset"] = presets[p["tolerance"]]
    return {
        "protocols": protos,
        "reasons": reasons,
        # what scores -1 for the candidate's doing: all but ok and the task's own failure
        "outcomes": outcomes - {"ok", "task_error"},
        "cases": manifest_codes(),
        "margin": reward_constant("kFasterMargin"),
        "forged_ratio": reward_constant("kForgedRatio"),
        "trials": int(eval_default("trials")),
        "own_work_min": policy.DEFAULT_POLICY["own_work_min"],
        "roofline_slack": runner.DEFENSES["roofline_slack"],
        "precision_ratio": runner.DEFENSES["precision_ratio"],
        "precision_floor": evidence.PRECISION_FLOOR["float32"],
        "peak_source": inspect.getsource(evidence.measure_flops),
        "nvcc_flags": re.findall(r'"([^"]+)"', cpp_body(build, "std::vector<std::string> nvcc_flags(")),
        "arch": hopper_arch(),
        "fallback_arch": re.search(r'return "(sm_\w+)";', cpp_body(build, "std::string resolve_arch(")).group(1),
        "libraries": re.findall(r'starts_with\(name, "(\w+)"\)\) st->libs', build),
        "allowed_ops": set(policy.DEFAULT_POLICY["allowed_ops"]),
    }


# ---- SKILL.md's side ---------------------------------------------------------------------------

def bullets(text):
    """(section, bullet text joined) for every top-level bullet: "- " in column 0, continued by
    indented lines."""
    out, section = [], ""
    for line in text.split("\n"):
        if line.startswith("## "):
            section = line[3:]
        if line.startswith("- "):
            out.append([section, line[2:]])
        elif line.startswith("  ") and line.strip() and out and out[-1] is not None:
            out[-1][1] += " " + line.strip()
        else:
            out.append(None)
    return [tuple(b) for b in out if b is not None]


def rule_of(body):
    """(title, codes) of a bullet: its bold lead and the codes after its arrow (None: no arrow;
    [] and a malformed arrow are problems)."""
    title = (re.match(r"\*\*(.+?)\*\*", body) or re.match(r"(.{0,40})", body)).group(1)
    if ARROW not in body:
        return title, None
    tail = body[body.rindex(ARROW) + 1:].strip()
    if not re.fullmatch(r"`[a-z_]+`(, `[a-z_]+`)*", tail):
        return title, []
    return title, re.findall(r"`([a-z_]+)`", tail)


def rule_problems(text, name, side, no_case):
    p = side["protocols"][name]
    judged, outcomes = p["judged"], side["outcomes"]
    out, stated = [], set()
    for section, body in bullets(text):
        title, codes = rule_of(body)
        if codes is None:
            if section.startswith("Rules"):
                out.append("%s: the rule '%s' names no reason of the judge (no '%s `reason`')" % (name, title, ARROW))
            continue
        if not codes:
            out.append("%s: the rule '%s' has a malformed arrow: '%s ' then `codes` only" % (name, title, ARROW))
        for code in codes:
            stated.add(code)
            if code not in judged | outcomes:
                out.append("%s: the rule '%s' names `%s`, which the judge does not decide under %s"
                           % (name, title, code, name))
            elif code not in side["cases"] and code not in no_case:
                out.append("%s: the rule '%s' names `%s`, which no hack-suite or red-team case expects (nor NO_CASE)"
                           % (name, title, code))
    arrows = sum(body.count(ARROW) for _s, body in bullets(text))
    if text.count(ARROW) != arrows:
        out.append("%s: an arrow outside a rule bullet" % name)
    for code in sorted(judged - stated - set(NOT_A_RULE)):
        out.append("%s: the judge decides `%s` but no SKILL.md rule states it" % (name, code))
    known = side["reasons"] | outcomes | {c for q in side["protocols"].values() for c in q["judged"]}
    for code in sorted(set(re.findall(r"`([a-z_]+)`", text)) & (known - judged - outcomes - set(NOT_A_RULE))):
        out.append("%s: SKILL.md names `%s`, which the judge does not decide under %s" % (name, code, name))
    row = re.search(r"^\| -1 \|(.*)$", text, re.M)
    named = set(re.findall(r"`([a-z_]+)`", row.group(1))) if row else set()
    if named != outcomes:
        out.append("%s: the -1 row names outcomes %s, the judge's are %s" % (name, sorted(named), sorted(outcomes)))
    return out


def each(out, name, text, pattern, expected, what, required=True):
    found = re.findall(pattern, text)
    if required and not found:
        out.append("%s: SKILL.md no longer states %s" % (name, what))
    for got in found:
        if not math.isclose(float(got), expected, rel_tol=1e-9):
            out.append("%s: SKILL.md says %s %s, the judge uses %g" % (name, what, got, expected))


def tolerance_problems(text, name, side):
    out = []
    correctness = [body for _s, body in bullets(text) if body.startswith("**Correctness**")]
    if len(correctness) != 1:
        return ["%s: SKILL.md states correctness in %d bullets, not one" % (name, len(correctness))]
    stated = {}
    for dt, tol, norm in re.findall(r"\b(fp32|fp16|bf16) (?:atol = rtol = )?([0-9.e+-]+)"
                                    r"(?:(?: and relative L2 error|, L2) ([0-9.e+-]+))?", correctness[0]):
        stated[DTYPES[dt]] = (float(tol), float(norm) if norm else None)
    for dtype, (atol, rtol, norm) in side["protocols"][name]["preset"].items():
        if dtype == "float64":
            continue  # the tasks' reference dtypes are float32 and below
        if dtype not in stated:
            out.append("%s: SKILL.md states no tolerance for %s" % (name, dtype))
        elif stated[dtype] != (atol, norm) or atol != rtol:
            out.append("%s: SKILL.md says %s tolerance %s, L2 %s; the judge's preset %s has atol %g rtol %g, norm %s"
                       % (name, dtype, stated[dtype][0], stated[dtype][1], side["protocols"][name]["tolerance"],
                          atol, rtol, norm))
    return out


def number_problems(text, name, side):
    p = side["protocols"][name]
    out = tolerance_problems(text, name, side) + library_problems(text, name, side) + op_problems(text, name, side)
    text = " ".join(text.split())  # phrases run across lines
    each(out, name, text, r"([0-9.]+)% faster", 100 * side["margin"], "the reward's margin (% faster)")
    each(out, name, text, r"\b(0\.[0-9]+)x", 1 - side["margin"], "the reward's margin (a runtime ratio)")
    each(out, name, text, r"\b(\d+) fresh input sets", side["trials"], "the trials")
    each(out, name, text, r"at least (\d+)% of the GPU time", 100 * side["own_work_min"], "the own-work share",
         required=p["own_work"])
    each(out, name, text, r"over (\d+)% of the GPU time", 100 * (1 - side["own_work_min"]), "the foreign share",
         required=False)
    each(out, name, text, r"([0-9.]+)x slack", side["roofline_slack"], "the roofline's slack")
    each(out, name, text, r"max\((\d+)x the fp32 reference's own", side["precision_ratio"], "the precision ratio")
    each(out, name, text, r"reference's own, 2\^(-?\d+)\)", math.log2(side["precision_floor"]), "the precision floor")
    each(out, name, text, r"over (\d+)x below", side["forged_ratio"], "the forgery ratio")
    each(out, name, text, r"(\d+) calls get inputs", share.checks()["stress_trials"], "the stress trials")
    each(out, name, text, r"within (\d+)% of the right answer", 100 * stress.GROSS_FLOOR, "the stress trials' limit")
    peak = re.search(r"FLOPs at the (\w+) tensor-core peak", text)
    if not peak or "torch.%s" % DTYPES.get(peak.group(1), "?") not in side["peak_source"]:
        out.append("%s: SKILL.md's roofline peak (%s) is not the one the judge measures (evidence.measure_flops)"
                   % (name, peak and peak.group(1)))
    flags = re.search(r"nvcc `([^`]+)`", text)
    for flag in (flags.group(1).split() if flags else ["(none stated)"]):
        if flag not in side["nvcc_flags"]:
            out.append("%s: SKILL.md says nvcc gets %s; build.cpp's nvcc_flags do not have it" % (name, flag))
    for arch in set(re.findall(r"\bsm_\w+", text)) - {side["arch"]}:
        out.append("%s: SKILL.md names %s; anvil builds for %s on Hopper" % (name, arch, side["arch"]))
    tf32 = [eval_default("allow_tf32") == "false", not runner.FLAGS["allow_tf32"]]
    cudnn = ("cuDNN's TF32 on", [p["cudnn_allow_tf32"]]) if p["cudnn_allow_tf32"] else \
        ("TF32 off for eager and compile (matmul and cuDNN)", [not p["cudnn_allow_tf32"]])
    settings = (("TF32 off for eager and compile", tf32), cudnn,
                ("L2 flushed", [eval_default("flush_l2") == "true"]),
                ("host launch latency hidden", [eval_default("hide_launch") == "true"]))
    for phrase, holds in settings:
        if phrase not in text or not all(holds):
            out.append("%s: '%s' is not stated, or not what the judge does" % (name, phrase))
    return out


def library_problems(text, name, side):
    text = " ".join(text.split())
    m = re.search(r"Including ((?:`<[\w.]+>`(?:, | or )?)+) links that library", text)
    headers = re.findall(r"`<([\w.]+)>`", m.group(1)) if m else []
    prefixes = side["libraries"]
    out = ["%s: SKILL.md says <%s> links a library; the build links only %s" % (name, h, prefixes)
           for h in headers if not any(h.startswith(p) for p in prefixes)]
    out += ["%s: the build links %s for its headers; SKILL.md does not say so" % (name, p)
            for p in prefixes if not any(h.startswith(p) for h in headers)]
    return out


def op_problems(text, name, side):
    """The ops the no-torch-compute rule lets forward call are the policy's, those it forbids are not."""
    rule = [body for _s, body in bullets(text) if body.startswith("**No torch compute**")]
    if side["protocols"][name]["torch_ops"] or not rule:
        return []  # its absence under cuda-agent is rule_problems' (torch_fallback unstated)
    allowed_part, _, forbidden_part = rule[0].partition(" No `")
    out = []
    for op in re.findall(r"`([a-z_]+)`", allowed_part.partition("may only")[2]):
        if op not in side["allowed_ops"] | {"cuda_extension"}:
            out.append("%s: SKILL.md lets forward call `%s`, which the op policy forbids" % (name, op))
    for op in re.findall(r"`(torch[\w.]+)`", "`" + forbidden_part):
        if op.rsplit(".", 1)[-1] in side["allowed_ops"]:
            out.append("%s: SKILL.md forbids `%s`, which the op policy allows" % (name, op))
    return out


def weight_problems(text, name, side):
    seeded = side["protocols"][name]["seeded_weights"]
    text = " ".join(text.split())
    out = []
    if ("load_state_dict(strict=True)" in text) == seeded:
        out.append("%s: SKILL.md %s the strict load_state_dict the judge %s" % (
            name, "states" if seeded else "does not state", "does not use" if seeded else "uses"))
    if ("after the same seed" in text) != seeded:
        out.append("%s: SKILL.md %s seeded weights, which the judge %s" % (
            name, "states" if not seeded else "does not state", "does not use" if not seeded else "uses"))
    return out


def problems(text, no_case=None):
    """Every way `text`, as a SKILL.md, disagrees with the judge; [] when it does not."""
    side = judge_side()
    no_case = NO_CASE if no_case is None else no_case
    out = []
    for name in sorted(side["protocols"]):
        rendered = render(text, name)
        out += rule_problems(rendered, name, side, no_case)
        out += number_problems(rendered, name, side)
        out += weight_problems(rendered, name, side)
    return out


# ---- the tests ---------------------------------------------------------------------------------

def skill():
    with open(SKILL, encoding="utf-8") as f:
        return f.read()


def test_the_shipped_skill_states_exactly_the_rules_the_judge_enforces():
    found = problems(skill())
    assert not found, "\n".join(found)


def _drop_bullet(lead):
    def drop(text):
        return re.sub(r"^- \*\*%s\*\*.*\n(?:  .*\n)*" % re.escape(lead), "", text, count=1, flags=re.M)
    return drop


def _sub(old, new):
    return lambda text: text.replace(old, new, 1)


def _add_rule(line):
    return lambda text: text.replace("## Optimising for Hopper", line + "\n\n## Optimising for Hopper", 1)


MUTATIONS = {
    "a rule dropped": (_drop_bullet("Precision"), "decides `precision` but no SKILL.md rule states it"),
    "a protocol's rule dropped": (_drop_bullet("Your kernels do the work"),
                                  "cuda-agent: the judge decides `foreign_work` but no SKILL.md rule states it"),
    "a fake reason": (_add_rule("- **No printing**: never print from a kernel \u2192 `printf_used`"),
                      "names `printf_used`, which the judge does not decide"),
    "a rule with no reason": (_add_rule("- **Be nice**: comment your kernels"), "'Be nice' names no reason"),
    "a malformed arrow": (_sub("`foreign_work`\n", "foreign work\n"), "has a malformed arrow"),
    "a protocol's rule for all": (lambda t: t.replace("<!-- protocol: cuda-agent -->\n- **No torch compute**",
                                                      "- **No torch compute**", 1)
                                  .replace("→ `torch_fallback`\n- **Your kernels", "→ `torch_fallback`\n"
                                           "<!-- protocol: cuda-agent -->\n- **Your kernels", 1),
                                  "kernelbench: the rule 'No torch compute' names `torch_fallback`, which the judge "
                                  "does not decide under kernelbench"),
    "a reason the protocol lacks, in passing": (_sub("| wrong values though the math is right |",
                                                     "| `no_kernels` |"),
                                                "kernelbench: SKILL.md names `no_kernels`"),
    "an outcome dropped from the -1 row": (_sub(", hang (`timeout`)", ""), "the -1 row names outcomes"),
    "the share changed": (_sub("at least 90% of the GPU time", "at least 80% of the GPU time"),
                          "the own-work share 80"),
    "the precision ratio changed": (_sub("max(16x the", "max(8x the"), "the precision ratio 8"),
    "the precision floor changed": (_sub("2^-14)", "2^-12)"), "the precision floor -12"),
    "the slack changed": (_sub("1.25x slack", "1.5x slack"), "the roofline's slack 1.5"),
    "the forgery ratio changed": (_sub("over 10x below", "over 100x below"), "the forgery ratio 100"),
    "a tolerance changed": (_sub("relative L2 error 1e-5", "relative L2 error 1e-6"),
                            "cuda-agent: SKILL.md says float32 tolerance 0.0001, L2 1e-06"),
    "a norm the preset lacks": (_sub("fp32 atol = rtol = 1e-4; fp16", "fp32 atol = rtol = 1e-4, L2 1e-5; fp16"),
                                "kernelbench: SKILL.md says float32 tolerance"),
    "the trials changed": (lambda t: t.replace("5 fresh input sets", "3 fresh input sets"), "the trials 3"),
    "the margin changed": (_sub("more than 5% faster than eager PyTorch", "more than 10% faster than eager PyTorch"),
                           "the reward's margin (% faster) 10"),
    "the peak changed": (lambda t: re.sub(r"bf16(\s+)tensor-core", r"fp16\1tensor-core", t), "roofline peak (fp16)"),
    "an nvcc flag invented": (_sub("nvcc `-O3", "nvcc `-O2"), "nvcc gets -O2"),
    "the architecture changed": (_sub("sm_90a) and linked", "sm_80) and linked"), "names sm_80"),
    "TF32 said on": (_sub("TF32 off for eager and compile", "TF32 on for eager and compile"), "'TF32 off"),
    "a library invented": (_sub("or `<cudnn.h>` links", "or `<cufft.h>` links"), "<cufft.h> links a library"),
    "an op allowed that the policy forbids": (_sub("read\n  metadata", "`add`, read\n  metadata"),
                                              "lets forward call `add`"),
    "weights by seed under cuda-agent": (_sub("by `load_state_dict(strict=True)`", "after the same seed"),
                                         "cuda-agent: SKILL.md states seeded weights"),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_a_skill_that_disagrees_with_the_judge_fails(name):
    mutate, expected = MUTATIONS[name]
    text = skill()
    broken = mutate(text)
    assert broken != text, "the mutation %r no longer applies to SKILL.md: update it" % name
    found = problems(broken)
    assert any(expected in p for p in found), "%s: expected a problem with %r, got:\n%s" % (
        name, expected, "\n".join(found) or "(none)")


def test_a_reason_no_case_expects_must_be_accounted_for():
    found = problems(skill(), no_case={})
    for code in NO_CASE:
        assert any("names `%s`, which no hack-suite or red-team case expects" % code in p for p in found), code


def test_no_case_and_not_a_rule_entries_hold():
    side = judge_side()
    for code, (path, test_name, why) in NO_CASE.items():
        assert code not in side["cases"], "%s now has a case: remove it from NO_CASE" % code
        assert re.search(r"^def %s\(" % test_name, read(path), re.M), "%s::%s is gone" % (path, test_name)
        assert code in side["reasons"] and why
    assert set(NOT_A_RULE) <= side["reasons"]


def test_every_protocol_dependent_check_is_probed():
    """gated_off() probes the checks that read the protocol's policy (torch_ops, own_work): a new one
    must be probed there too, else a reason it silences would count as judged under every protocol."""
    readers = set()
    for name in ("judge.py", "findings.py", "policy.py", "candidate.py", "harness.py", "batch.py"):
        tree = ast.parse(read("python/anvil/" + name))
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(isinstance(n, ast.Constant) and n.value in ("torch_ops", "own_work") for n in ast.walk(fn)):
                    readers.add(fn.name)
    assert readers == {"forbidden", "torch_fallback", "proof_of_work", "timing_escape", "analyze_trace"}, readers
    protos = judge_side()["protocols"]
    assert {n: sorted(judge_side()["reasons"] - p["judged"]) for n, p in protos.items()} == {
        n: sorted(({"torch_fallback"} if p["torch_ops"] else set()) |
                  ({"no_kernels", "foreign_work"} if not p["own_work"] else set())) for n, p in protos.items()}


def test_the_judges_side_is_read_whole():
    side = judge_side()
    assert {"cuda-agent", "kernelbench"} <= set(side["protocols"])
    assert set(judge.REASONS) | {"timing_forged", "mismatch", "unwritten_output", "input_mutated",
                                 "gpu_memory"} <= side["reasons"]
    assert side["nvcc_flags"][:3] and side["libraries"]
    assert side["arch"] == side["fallback_arch"] and side["arch"].startswith("sm_90"), side["fallback_arch"]
    for p in side["protocols"].values():
        assert {"float32", "float16", "bfloat16"} <= set(p["preset"]), p


# ---- the worked example, the workflow, the tools -----------------------------------------------

def code_blocks(lang):
    return re.findall(r"```%s\n(.*?)```" % lang, skill(), re.S)


def launcher_types(decl):
    """The parameter types of an extern "C" launcher declaration, names dropped, streams as one."""
    params = re.search(r'extern "C" int \w+\(([^)]*)\)', decl, re.S).group(1)
    out = []
    for p in params.split(","):
        p = " ".join(p.split())
        p = re.sub(r"\s*\b\w+$", "", p) if re.search(r"[\w*]\s+\w+$", p) else p
        out.append({"anvil::Stream": "cudaStream_t"}.get(p, p))
    return out


def test_the_example_launcher_takes_a_config_before_the_stream_and_every_binding_passes_it():
    kernel, fast, compat = code_blocks("cpp")
    types_ = launcher_types(kernel)
    assert types_[-2:] == ["int", "cudaStream_t"], types_
    for binding in (fast, compat):
        assert launcher_types(binding) == types_, binding
        assert "int64_t config)" in binding and "(int)config" in binding
    (model_new,) = code_blocks("python")
    assert "self.config = " in model_new and "self.config)" in model_new


def test_the_example_model_new_passes_its_config_to_the_binding():
    torch = pytest.importorskip("torch")
    calls = []
    fake = types.ModuleType("cuda_extension")
    fake.scale_bias = lambda *args: calls.append(args) or args[0]
    saved = sys.modules.get("cuda_extension")
    sys.modules["cuda_extension"] = fake
    try:
        scope = {}
        exec(compile(code_blocks("python")[0], "model_new.py", "exec"), scope)
        model = scope["ModelNew"](8, 2.0)
    finally:
        if saved is None:
            del sys.modules["cuda_extension"]
        else:
            sys.modules["cuda_extension"] = saved
    assert isinstance(model.config, int) and list(model.state_dict()) == ["bias"]  # config is no weight
    model.config = 3  # what tune does after construction
    model(torch.randn(4, 8))
    assert calls[-1][-1] == 3


def _compile(argv, tmp_path):
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, "%s\n%s%s" % (" ".join(argv), proc.stdout, proc.stderr)


def test_the_example_fast_binding_compiles(tmp_path):
    cxx = shutil.which("g++") or pytest.skip("no g++")
    (tmp_path / "b.cpp").write_text(code_blocks("cpp")[1])
    _compile([cxx, "-std=c++17", "-fsyntax-only", "-Wall", "-Werror", "-I" + os.path.join(ROOT, "include"),
              "b.cpp"], tmp_path)


def test_the_example_kernel_compiles(tmp_path):
    nvcc = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None)
    if not nvcc:
        pytest.skip("no nvcc")
    (tmp_path / "k.cu").write_text(code_blocks("cpp")[0])
    _compile([nvcc, "-std=c++17", "-O3", "--use_fast_math", "-arch=" + judge_side()["arch"], "-c", "k.cu", "-o", "k.o"],
             tmp_path)


def test_the_example_compat_binding_compiles(tmp_path):
    cxx = shutil.which("g++") or pytest.skip("no g++")
    cpp_extension = pytest.importorskip("torch.utils.cpp_extension")
    cuda = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    if not os.path.exists(os.path.join(cuda, "include", "cuda_runtime_api.h")):
        pytest.skip("no CUDA headers (c10/cuda needs them)")
    import sysconfig

    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "b.cpp").write_text(code_blocks("cpp")[2])
    shutil.copy(os.path.join(ROOT, "share", "workdir", "binding_registry.h"), tmp_path)
    argv = [cxx, "-std=c++17", "-fsyntax-only", "-isystem", sysconfig.get_paths()["include"],
            "-isystem", os.path.join(cuda, "include"), "kernels/b.cpp"]
    for inc in cpp_extension.include_paths():
        argv[2:2] = ["-isystem", inc]
    _compile(argv, tmp_path)


def section(name):
    text = skill()
    start = text.index("\n## %s" % name)
    end = text.find("\n## ", start + 1)
    return text[start:end]


def test_the_workflow_is_the_papers_order():
    """Profile the reference, plan, write, compile, verify, profile, tune within a budget, finish."""
    flow = section("Workflow")
    steps = re.findall(r"^\d+\. \*\*(\w+)", flow, re.M)
    assert steps == ["Profile", "Plan", "Write", "Compile", "Verify", "Profile", "Tune"], steps
    firsts = [flow.index("`%s`" % tool) for tool in
              ("profile_reference", "todo_write", "compile", "verify", "profile", "tune", "finish")]
    assert firsts == sorted(firsts), firsts
    assert re.search(r"within (\d+) `tune` calls", flow), "the tuning budget is not stated"
    assert "Tuning last" not in skill() and "Aim for" not in skill()


def tool_schema(source, name):
    """The text of tool `name`'s schema in tools.cpp: from its fn("name", to the next push_back."""
    start = source.index('fn("%s",' % name)
    end = source.find("schemas_.push_back", start)
    return source[start:end if end > 0 else len(source)]


def test_the_tools_described_are_the_tool_boxs():
    tools = section("Tools")
    described = set(re.findall(r"^- `(\w+)`", tools, re.M))
    described |= set(re.findall(r"^- `\w+`, `(\w+)`, `(\w+)`; `(\w+)`", tools, re.M)[0])
    source = read("src/anvil/agent/tools.cpp")
    offered = set(re.findall(r'fn\("(\w+)",', source))
    assert described == offered, "SKILL.md describes %s; tools.cpp offers %s" % (sorted(described), sorted(offered))
    # The new tools' arguments, their defaults and limits, as the tool box takes them.
    for name in ("profile_reference", "ncu_profile", "tune"):
        schema = tool_schema(source, name)
        bullet = re.search(r"^- `%s`.*?(?=^- |\Z)" % name, tools, re.M | re.S).group(0)
        for arg in set(re.findall(r'\{"(\w+)", (?:int_prop|str_prop|\{\{"type")', schema)) - {"items", "properties"}:
            assert "`%s`" % arg in bullet, "SKILL.md's %s does not name its argument %s" % (name, arg)
        for value in re.findall(r'"enum", \{([^}]*)\}', schema):
            for v in re.findall(r'"(\w+)"', value):
                assert '`"%s"`' % v in bullet, "SKILL.md's %s does not name %s" % (name, v)
    top_default = re.search(r"default (\d+)", tool_schema(source, "profile_reference")).group(1)
    assert "`top`, default %s" % top_default in tools
    limit = re.search(r"kMaxTuneConfigs = (\d+);", read("src/anvil/agent/tools.h")).group(1)
    assert "`configs`: 1 to %s distinct integers" % limit in tools
