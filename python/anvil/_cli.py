"""Shared plumbing of the JSON command-line tools: one JSON object on the real stdout.

Imported code (tasks, torch, C++ extensions) may print; `quiet_stdout` points file descriptor 1
at stderr while it runs, so nothing but the final JSON object reaches stdout.
"""
import argparse
import contextlib
import json
import math
import os
import stat
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


_report_fds = []  # every ReportChannel's descriptors in this process (report_descriptors)
_done_fds = []  # its done pipe (anvil.zygote's child), told of waits for the GPU's lock
os.register_at_fork(after_in_child=_done_fds.clear)  # a forked child (the candidate's process) tells nothing


def gpu_lock_wait(waiting):
    """Tells anvil that this process begins (True) or ends (False) a wait for the GPU's lock
    (timing.GpuLock): one byte, "w" or "h", on the zygote's done pipe, which the zygote passes on
    ({"lock": "waiting"|"held"}), so that the time limit does not count the wait. Nothing without a
    done pipe (a fresh process: its limit counts the wait), nor in a child forked since (the
    candidate's process: the list is cleared at the fork, the pipe closed there)."""
    for fd in _done_fds:
        try:
            os.write(fd, b"w" if waiting else b"h")
        except OSError:
            pass


def report_descriptors():
    """The descriptors of this process's ReportChannels (its report and the zygote's done pipe):
    a child that must not be able to report (the candidate's process, forked by the judge) closes
    them first thing."""
    return list(_report_fds)


class ReportChannel:
    """Where the one report goes: a private duplicate of fd 3 (which is then closed, so candidate
    code cannot write there by number), else of fd 1. send() writes once; later calls do nothing."""

    def __init__(self, protocol):
        self.protocol = protocol
        self.fd = None
        try:
            mode = os.fstat(3).st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode):
                self.fd = os.dup(3)
                os.close(3)
        except OSError:
            self.fd = None
        self.to_stdout = self.fd is None
        if self.to_stdout:
            self.fd = os.dup(1)
        self.sent = False
        self.done = None  # a pipe told "1" once the report is written (anvil.zygote)
        try:
            fd = int(os.environ.pop("ANVIL_DONE_FD", ""))
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                self.done = os.dup(fd)
                os.close(fd)
        except (ValueError, OSError):
            self.done = None
        _report_fds.extend(fd for fd in (self.fd, self.done) if fd is not None)
        if self.done is not None:
            _done_fds.append(self.done)

    def send(self, report):
        if self.sent:
            return
        self.sent = True
        try:
            text = json.dumps(_finite(report), allow_nan=False)
        except (TypeError, ValueError) as e:  # never expected: the report holds plain values
            text = json.dumps({"protocol": self.protocol, "status": "error", "outcome": None,
                               "message": "the report could not be encoded: %s" % e})
        data = (text + "\n").encode("utf-8")
        for stream in (sys.stdout, sys.stderr):  # the output is complete before the report is
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - the candidate may have closed them
                pass
        written = False
        try:
            while data:
                data = data[os.write(self.fd, data):]
            written = True
        except OSError:
            pass  # anvil went away; nothing to tell
        try:
            os.close(self.fd)
        except OSError:
            pass
        _report_fds[:] = [fd for fd in _report_fds if fd not in (self.fd, self.done)]  # numbers now free
        _done_fds[:] = [fd for fd in _done_fds if fd != self.done]
        if self.done is not None:
            try:
                if written:
                    os.write(self.done, b"1")  # the report is complete: the process need not be waited for
                os.close(self.done)
            except OSError:
                pass


def exit_after(main):
    """Run `main`, flush, and leave with its status without the interpreter's teardown (threads,
    atexit hooks and a broken CUDA context of the code it ran must not change the status or hang
    the process after its report is out): the `entry()` of anvil's fresh processes."""
    status = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    os._exit(status)


def answer_one(protocol, handle):
    """A one-request process's main (anvil.vet, anvil.warm): the request read on stdin, its report
    (`handle(text)`, never raising) sent on fd 3 when open (anvil.zygote's child), else as the last
    line of stdout; exit status 0 when its status is "done", else 2."""
    if os.getpid() == 1:  # PID 1 of the namespace anvil made: a /proc of its own, as the runner has (CUDA's
        from anvil import confine  # driver finds nothing of this process in the host's /proc by its pid)

        confine.own_proc()
    channel = ReportChannel(protocol)
    try:
        report = handle(sys.stdin.read())
    except Exception as e:  # noqa: BLE001 - reading stdin failed
        message = one_line(str(e))
        report = {"protocol": protocol, "status": "error", "message": "cannot read the request: %s" % (
            "%s: %s" % (type(e).__name__, message) if message else type(e).__name__)}
    channel.send(report)
    return 0 if report.get("status") == "done" else 2
