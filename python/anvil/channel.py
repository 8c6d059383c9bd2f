"""The wire between the judge and the candidate's process (docs/anti-hacking.md, "Two processes").

One SOCK_SEQPACKET socket pair, created before the fork. A message is one JSON object; tensors
travel beside it in a memfd (passed with SCM_RIGHTS), so their bytes never go through a pipe and
the receiver maps them without a copy. A value (an output: a tensor, or tuples, lists and dicts of
them and of plain scalars) is sent as a skeleton in which every tensor is {"__tensor__": i}, tuples
are {"__tuple__": [...]}, and anything else is {"__object__": "its type name"}.

Both sides capture what they call (socket methods, json, mmap, os) when this module is imported,
before any candidate code exists, so a candidate that patches json.dumps or socket.send in its own
process changes nothing here; the candidate side also fingerprints them (anvil.policy).
"""
import json
import mmap
import os
import socket

MAX_HEADER = 1 << 20
MAX_FDS = 1

_dumps = json.dumps
_loads = json.loads
_sendmsg = socket.socket.sendmsg
_recv_fds = socket.recv_fds
_memfd_create = os.memfd_create
_ftruncate = os.ftruncate
_close = os.close
_mmap = mmap.mmap
_isinstance = isinstance
_len = len


class ChannelClosed(Exception):
    """The other side went away (EOF or a broken socket)."""


def pair():
    """(judge_end, candidate_end): a connected SOCK_SEQPACKET pair, both inheritable by fork."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def _skeleton(value, tensors, depth=0):
    import torch

    if type(value) is torch.Tensor:
        tensors.append(value)
        return {"__tensor__": _len(tensors) - 1}
    if _isinstance(value, torch.Tensor):  # a subclass: the judge never sees it as a tensor
        return {"__object__": type(value).__module__ + "." + type(value).__name__}
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value if value == value and value not in (float("inf"), float("-inf")) else {"__float__": repr(value)}
    if depth < 32 and type(value) in (list, tuple):
        items = [_skeleton(v, tensors, depth + 1) for v in value]
        return items if type(value) is list else {"__tuple__": items}
    if depth < 32 and type(value) is dict and all(type(k) is str for k in value):
        return {"__dict__": {k: _skeleton(v, tensors, depth + 1) for k, v in value.items()}}
    return {"__object__": type(value).__module__ + "." + type(value).__name__}


def send(sock, message, value=None):
    """Send `message` (a JSON object); with `value`, its tensors go in a memfd (copied to host
    memory here) and message["value"] is its skeleton."""
    fds = []
    fd = None
    try:
        if value is not None:
            tensors = []
            message = dict(message, value=_skeleton(value, tensors))
            layout, total = [], 0
            for t in tensors:
                nbytes = t.numel() * t.element_size()
                layout.append({"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                               "offset": total, "nbytes": nbytes, "device": t.device.type})
                total += (nbytes + 63) // 64 * 64
            message["tensors"] = layout
            if tensors:
                fd = _memfd_create("anvil-tensors")
                _ftruncate(fd, max(total, 1))
                _write_tensors(fd, total, tensors, layout)
                fds = [fd]
        data = _dumps(message).encode("utf-8")
        if _len(data) > MAX_HEADER:
            raise ValueError("message of %d bytes is too large" % _len(data))
        try:
            _sendmsg(sock, [data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(_fd_array(fds)))] if fds else [])
        except (BrokenPipeError, ConnectionResetError) as e:
            raise ChannelClosed(str(e))
    finally:
        if fd is not None:
            _close(fd)


def _fd_array(fds):
    import array

    return array.array("i", fds)


def _write_tensors(fd, total, tensors, layout):
    import torch

    with _mmap(fd, max(total, 1)) as m:
        for t, entry in zip(tensors, layout):
            if entry["nbytes"] == 0:
                continue
            host = torch.frombuffer(m, dtype=torch.uint8, count=entry["nbytes"], offset=entry["offset"])
            src = t.detach()
            if not src.is_contiguous():
                src = src.contiguous()
            host.copy_(src.reshape(-1).view(torch.uint8))
            del host


def recv(sock):
    """The next message, with message["value"] rebuilt (tensors on the CPU, owning their memory).
    Raises ChannelClosed at EOF."""
    try:
        data, fds, _flags, _addr = _recv_fds(sock, MAX_HEADER, MAX_FDS)
    except (ConnectionResetError, BrokenPipeError) as e:
        raise ChannelClosed(str(e))
    if not data:
        for fd in fds:
            _close(fd)
        raise ChannelClosed("the other side closed the channel")
    try:
        message = _loads(data.decode("utf-8"))
        if "value" in message:
            tensors = _read_tensors(fds[0] if fds else None, message.get("tensors") or [])
            message["value"] = _rebuild(message["value"], tensors)
        return message
    finally:
        for fd in fds:
            _close(fd)


def _read_tensors(fd, layout):
    import torch

    if not layout:
        return []
    if fd is None:
        raise ValueError("a message with tensors came without their memory")
    size = os.fstat(fd).st_size
    out = []
    with _mmap(fd, size, prot=mmap.PROT_READ) as m:
        for entry in layout:
            dtype = getattr(torch, entry["dtype"], None)
            if not _isinstance(dtype, torch.dtype):
                raise ValueError("unknown dtype %r" % entry["dtype"])
            if entry["offset"] + entry["nbytes"] > size:
                raise ValueError("a tensor lies outside its memory")
            t = torch.empty(entry["shape"], dtype=dtype)
            if entry["nbytes"]:
                if t.numel() * t.element_size() != entry["nbytes"]:
                    raise ValueError("a tensor's shape and size disagree")
                raw = torch.frombuffer(m, dtype=torch.uint8, count=entry["nbytes"], offset=entry["offset"])
                t.view(-1).view(torch.uint8).copy_(raw)
                del raw
            out.append(t)
    return out


class Opaque:
    """Something the candidate returned that is neither a plain tensor nor a plain value."""

    def __init__(self, type_name):
        self.type_name = type_name

    def __repr__(self):
        return "<%s>" % self.type_name

    def __eq__(self, other):
        return False

    __hash__ = None


def _rebuild(skeleton, tensors):
    if _isinstance(skeleton, list):
        return [_rebuild(v, tensors) for v in skeleton]
    if _isinstance(skeleton, dict):
        if "__tensor__" in skeleton:
            return tensors[skeleton["__tensor__"]]
        if "__tuple__" in skeleton:
            return tuple(_rebuild(v, tensors) for v in skeleton["__tuple__"])
        if "__dict__" in skeleton:
            return {k: _rebuild(v, tensors) for k, v in skeleton["__dict__"].items()}
        if "__float__" in skeleton:
            return float(skeleton["__float__"])
        if "__object__" in skeleton:
            return Opaque(skeleton["__object__"])
    return skeleton
