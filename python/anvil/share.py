"""anvil's share/ folder: where its files are, and share/protocol.json's rules.

share/protocol.json is the one home of the tolerance presets, the protocols' rules and a timed
evaluation's defaults: the C++ compiles the same file in (src/anvil/env/protocol.h), so both languages
judge by one set of numbers. It is read on first use, not at import: a machine with the package but
without anvil's tree (an RL trainer's node) imports these modules and never judges."""
import copy
import functools
import json
import os


def path(*parts):
    """A file under share/: $ANVIL_HOME's (anvil sets it for the processes it starts), else the one
    beside this package in anvil's tree."""
    home = os.environ.get("ANVIL_HOME") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    return os.path.join(home, "share", *parts)


@functools.lru_cache(maxsize=None)
def _protocol_file():
    where = path("protocol.json")
    try:
        with open(where, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise RuntimeError("cannot read anvil's judging rules %s: %s" % (where, e)) from None


def tolerance(preset):
    """The request's tolerance object of `preset`: {"preset": name, dtype: {atol, rtol, norm}}; KeyError
    for a preset the file does not name."""
    return dict(copy.deepcopy(_protocol_file()["tolerance_presets"][preset]), preset=preset)


def _protocol(name=None):
    """(name, entry) of the protocol `name`; the default protocol (the file's first, cuda-agent) for None."""
    protocols = _protocol_file()["protocols"]
    name = name or next(iter(protocols))
    return name, protocols[name]


def rules(protocol=None):
    """The runner request's "rules" of `protocol` (default: the file's first, cuda-agent)."""
    name, p = _protocol(protocol)
    return {"name": name, "torch_ops": p["torch_ops"], "own_work": p["own_work"], "weights": p["weights"]}


def timing():
    """A timed evaluation's defaults: {"warmup", "calls", "input_sets"}."""
    return dict(_protocol_file()["timing"])


def checks():
    """What a defended evaluation checks at positions it draws in secret: {"stress_trials",
    "precision_calls", "timed_full_share"}."""
    return dict(_protocol_file()["checks"])


def default_tolerance():
    """The tolerance object of the default protocol's preset (strict)."""
    return tolerance(_protocol()[1]["tolerance"])
