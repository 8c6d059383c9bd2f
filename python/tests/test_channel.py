"""anvil.channel: values round-trip through sealed memfds; unsealed tensor memory is refused."""
import array
import json
import os
import socket
import threading

import pytest
import torch

from anvil import channel


def roundtrip(value):
    a, b = channel.pair()
    try:
        sender = threading.Thread(target=channel.send, args=(a, {"type": "output"}, value))
        sender.start()
        message = channel.recv(b)
        sender.join()
        return message["value"]
    finally:
        a.close()
        b.close()


def test_tensors_and_structure_round_trip():
    x = torch.randn(3, 5)
    value = {"out": (x, torch.arange(7, dtype=torch.int64)[::2], [1.5, None, "s"]), "empty": torch.empty(0, 4)}
    got = roundtrip(value)
    out, idx, rest = got["out"]
    assert torch.equal(out, x) and out.dtype == torch.float32
    assert torch.equal(idx, torch.tensor([0, 2, 4, 6]))
    assert rest == [1.5, None, "s"] and got["empty"].shape == (0, 4)
    out.add_(1)  # the receiver owns its copy
    assert not torch.equal(out, x)


def test_a_subclass_arrives_opaque():
    class Sub(torch.Tensor):
        pass

    got = roundtrip(torch.ones(2).as_subclass(Sub))
    assert isinstance(got, channel.Opaque) and "Sub" in repr(got)


def test_a_seal_refused_for_a_while_is_tried_again(monkeypatch):
    """F_SEAL_WRITE's EBUSY for pages the kernel still holds for a moment (CI, a loaded 2-core
    machine: two candidates judged runtime_error) is waited out; a writable mapping that stays is
    still an error."""
    import errno
    import fcntl
    import mmap

    real, refused = channel._fcntl, [0]

    def busy_twice(fd, cmd, arg=0):
        if cmd == fcntl.F_ADD_SEALS and refused[0] < 2:
            refused[0] += 1
            raise OSError(errno.EBUSY, "Device or resource busy")
        return real(fd, cmd, arg)

    monkeypatch.setattr(channel, "_fcntl", busy_twice)
    x = torch.randn(64, 64)
    assert torch.equal(roundtrip(x), x) and refused[0] == 2
    monkeypatch.setattr(channel, "_fcntl", real)
    fd = os.memfd_create("held", os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, 4096)
        with mmap.mmap(fd, 4096) as m:  # a writable shared mapping, kept
            m[0] = 1
            with pytest.raises(OSError) as e:
                channel._seal(fd, tries=3)
            assert e.value.errno == errno.EBUSY
        channel._seal(fd)  # gone: sealed
        assert real(fd, fcntl.F_GET_SEALS) & channel.SEALS == channel.SEALS
    finally:
        os.close(fd)


def test_unsealed_tensor_memory_is_refused():
    """A sender that keeps the right to write (no seals) could change bytes the judge is reading."""
    a, b = channel.pair()
    fd = os.memfd_create("forged", os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, 64)
        header = {"type": "output", "value": {"__tensor__": 0},
                  "tensors": [{"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16, "device": "cpu"}]}
        a.sendmsg([json.dumps(header).encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(array.array("i", [fd])))])
        with pytest.raises(ValueError, match="unsealed"):
            channel.recv(b)
    finally:
        os.close(fd)
        a.close()
        b.close()


SENDER = r"""
import socket, sys, torch
sys.path.insert(0, sys.argv[2])
from anvil import channel
sock = socket.socket(fileno=int(sys.argv[1]))
g = torch.Generator().manual_seed(5)
x = torch.randn(1000, 333, generator=g).cuda()
value = {"big": x, "slice": x[7:9, 3:300], "int": torch.arange(10, device="cuda"), "host": torch.ones(3)}
shared = channel.send(sock, {"type": "output"}, value, ipc=True)
assert channel.recv(sock)["type"] == "received"
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_tensors_cross_through_ipc(tmp_path):
    """A second process's CUDA tensors arrive through CUDA IPC, equal to what it sent."""
    import subprocess
    import sys

    a, b = channel.pair()
    script = tmp_path / "sender.py"
    script.write_text(SENDER)
    python_dir = os.path.dirname(os.path.dirname(channel.__file__))
    proc = subprocess.Popen([sys.executable, str(script), str(a.fileno()), python_dir], pass_fds=[a.fileno()])
    a.close()
    try:
        message = channel.recv(b, torch.device("cuda"))
        channel.send(b, {"type": "received"})
        assert proc.wait(timeout=120) == 0
    finally:
        proc.kill()
        b.close()
    kinds = ["ipc" if "ipc" in e else "memfd" for e in message["tensors"]]
    assert kinds == ["ipc", "ipc", "ipc", "memfd"], message["tensors"]
    x = torch.randn(1000, 333, generator=torch.Generator().manual_seed(5)).cuda()
    got = message["value"]
    assert torch.equal(got["big"], x) and got["big"].is_cuda
    assert torch.equal(got["slice"], x[7:9, 3:300])
    assert torch.equal(got["int"], torch.arange(10, device="cuda"))
    assert torch.equal(got["host"], torch.ones(3, device="cuda"))


class _Side:
    """What SharedInputs asks of an Evaluation: seeded host inputs, a device, the request."""

    def __init__(self):
        self.req = {"seed": 10}
        self.device = torch.device("cpu")
        self.made = []

    def host_inputs(self, seed):
        self.made.append(seed)
        return [torch.full((4,), float(seed)), seed]

    def trial_seed(self, i):  # Harness.trial_seed without a base of the judge's
        return self.req["seed"] + 1 + i

    def to_device(self, args):
        return [a.to(self.device) if isinstance(a, torch.Tensor) else a for a in args]


def test_shared_inputs_split_the_trials_and_ignore_what_comes_after():
    judge_sock, cand_sock = channel.pair()
    judge, cand = channel.SharedInputs(judge_sock, 0, 5), channel.SharedInputs(cand_sock, 1, 5)
    j, c = _Side(), _Side()
    cand.make_mine(c)  # trials 1 and 3, sent before any candidate code exists
    channel.send(cand_sock, {"type": "inputs", "trial": 3}, [torch.zeros(4), 0])  # later, forged: never read
    judge.device_ready()
    cand.wait_device_ready()
    for i in judge.mine():
        judge.take(i, j)
    got = {i: judge.take(i, j) for i in (1, 3)}
    assert j.made == [11, 13, 15] and c.made == [12, 14]  # each side made only its own trials
    assert torch.equal(got[3][0], torch.full((4,), 14.0)) and got[3][1] == 14
    assert [cand.take(i, c)[1] for i in range(5)] == [11, 12, 13, 14, 15]
    assert c.made == [12, 14]  # the judge's trials came over; the candidate's own were not made again
    judge_sock.close()
    cand_sock.close()


def test_shared_inputs_make_what_does_not_come():
    judge_sock, cand_sock = channel.pair()
    judge = channel.SharedInputs(judge_sock, 0, 4)
    j = _Side()
    channel.send(cand_sock, {"type": "inputs", "trial": 1, "none": True})  # the other side could not send it
    channel.send(cand_sock, {"type": "inputs", "trial": 3, "value": {"__object__": "x.Y"}})  # not plain values
    assert judge.take(1, j) is None and judge.take(3, j) is None  # the caller makes them itself
    cand_sock.close()
    judge2_sock, gone = channel.pair()
    gone.close()
    judge2 = channel.SharedInputs(judge2_sock, 0, 4)
    assert judge2.take(1, j) is None  # the other side went away
    assert judge2.take(0, j)[1] == 11  # and sending to it is not an error
    judge_sock.close()
    judge2_sock.close()
