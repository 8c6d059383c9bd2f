"""Shared plumbing of the JSON command-line tools: one JSON object on the real stdout.

Imported code (tasks, torch, C++ extensions) may print; `quiet_stdout` points file descriptor 1
at stderr while it runs, so nothing but the final JSON object reaches stdout.
"""
import argparse
import contextlib
import json
import math
import os
import sys


@contextlib.contextmanager
def quiet_stdout():
    """Send everything written to stdout (Python and C level) to stderr inside the block."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        try:
            sys.stdout.flush()
        except Exception:  # a task may have closed or replaced sys.stdout
            pass
        os.dup2(saved, 1)
        os.close(saved)


def _finite(value):
    """Strict JSON has no NaN/Infinity: spell non-finite floats as strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def emit(obj):
    """Print `obj` as one line of strict JSON on the real stdout."""
    sys.__stdout__.write(json.dumps(_finite(obj), allow_nan=False) + "\n")
    sys.__stdout__.flush()


def one_line(text, limit=300):
    """The first non-empty line of `text`, cut to `limit` characters."""
    for line in str(text).splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


def tail(text, lines=15):
    """The last `lines` lines of `text`."""
    return "\n".join(str(text).rstrip("\n").splitlines()[-lines:])


class UsageError(Exception):
    """Bad command-line arguments (reported as JSON, exit status 2)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting."""

    def error(self, message):
        raise UsageError("%s: %s" % (self.prog, message))
