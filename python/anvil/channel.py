"""The wire between the judge and the candidate's process (docs/anti-hacking.md, "Two processes").

One SOCK_SEQPACKET socket pair, created before the fork. A message is one JSON object (over
INLINE_HEADER bytes it travels in a sealed memfd of its own, since a datagram must fit the socket's
buffer); tensors travel beside it in a memfd (passed with SCM_RIGHTS), so their bytes never go
through a pipe. The
sender seals the memfd against writes, shrinking and growing before it sends it, and the receiver
refuses one without those seals: the bytes it maps can no longer change, whoever else holds the
file, so it reads them in place (straight to the GPU when asked) without a private copy first.
With ipc, CUDA tensors go through CUDA IPC instead (anvil.cuda_ipc). A value (an output: a tensor,
or tuples, lists and dicts of them and of plain scalars) is sent as a skeleton in which every
tensor is {"__tensor__": i}, tuples are {"__tuple__": [...]}, and anything else is
{"__object__": "its type name"}.

Both sides capture what they call (socket methods, json, mmap, os) when this module is imported,
before any candidate code exists, so a candidate that patches json.dumps or socket.send in its own
process changes nothing here; the candidate side also fingerprints them (anvil.policy).
"""
import errno
import fcntl
import json
import math
import mmap
import os
import socket
import time

from anvil.opaque import Opaque  # noqa: F401 - what decode() makes of a value that is no plain one

MAX_HEADER = 64 << 20  # a message's JSON, at most
INLINE_HEADER = 32 << 10  # larger JSON travels in a sealed memfd of its own (a datagram must fit the socket buffer)
MAX_FDS = 2
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL

_dumps = json.dumps
_loads = json.loads
_sendmsg = socket.socket.sendmsg
_recv_fds = socket.recv_fds
_memfd_create = os.memfd_create
_fcntl = fcntl.fcntl
_sleep = time.sleep
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


def send(sock, message, value=None, ipc=False):
    """Send `message` (a JSON object); with `value`, message["value"] is its skeleton and its
    tensors go in a memfd (copied to host memory here) or, with `ipc`, CUDA tensors through CUDA
    IPC (anvil.cuda_ipc). Returns what the receiver may still be reading through IPC: keep it alive
    until it answers."""
    fds = []
    fd = None
    header_fd = [None]
    shared = []
    try:
        if value is not None:
            tensors = []
            message = dict(message, value=_skeleton(value, tensors))
            layout, total, in_memfd = [], 0, []
            for t in tensors:
                nbytes = t.numel() * t.element_size()
                entry = {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "nbytes": nbytes,
                         "device": t.device.type}
                layout.append(entry)
                exported = None
                if ipc and t.is_cuda and nbytes:
                    from anvil import cuda_ipc

                    src = t.detach() if t.is_contiguous() else t.detach().contiguous()
                    exported = cuda_ipc.export(src)
                    if exported is not None:
                        entry["ipc"] = exported
                        shared.append(src)
                if exported is None:
                    entry["offset"] = total
                    in_memfd.append((t, entry))
                    total += (nbytes + 63) // 64 * 64
            message["tensors"] = layout
            if in_memfd:
                tensors = [t for t, _ in in_memfd]
                layout = [e for _, e in in_memfd]
                fd = _memfd_create("anvil-tensors", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
                _ftruncate(fd, max(total, 1))
                _write_tensors(fd, total, tensors, layout)
                _seal(fd)  # after the writable mapping is gone
                fds = [fd]
        data = _dumps(message).encode("utf-8")
        if _len(data) > MAX_HEADER:
            raise ValueError("message of %d bytes is too large" % _len(data))
        if _len(data) > INLINE_HEADER:
            header = _sealed_memfd("anvil-header", data)
            fds = [header] + fds
            data = _dumps({"__header__": _len(data)}).encode("utf-8")
            header_fd[0] = header
        try:
            _sendmsg(sock, [data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(_fd_array(fds)))] if fds else [])
        except (BrokenPipeError, ConnectionResetError) as e:
            raise ChannelClosed(str(e))
    finally:
        for f in (fd, header_fd[0]):
            if f is not None:
                _close(f)
    return shared


def _sealed_memfd(name, data):
    fd = _memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        _seal(fd)
    except BaseException:
        _close(fd)
        raise
    return fd


def _seal(fd, tries=40):
    """Seals a memfd against every change. F_SEAL_WRITE refuses (EBUSY) while a page of it has a
    reference the kernel does not know as a mapping's; with no mapping left such references are
    transient (page migration, compaction, a batch of another CPU not yet drained) and on a loaded
    2-core machine outlived the kernel's own wait (about 0.1 s) twice in one CI run, judging two
    candidates runtime_error: tried again for up to about 2 s. A mapping that is really there (a
    child that inherited one) stays: then the error is raised."""
    for attempt in range(tries):
        try:
            _fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
            return
        except OSError as e:
            if e.errno != errno.EBUSY or attempt == tries - 1:
                raise
            _sleep(0.0025 * (attempt + 1))


def _read_sealed(fd, size):
    if _fcntl(fd, fcntl.F_GET_SEALS) & SEALS != SEALS:
        raise ValueError("a message came in unsealed memory: its sender could still change it")
    if os.fstat(fd).st_size != size or size > MAX_HEADER:
        raise ValueError("a message's memory and its size disagree")
    return os.pread(fd, size, 0)


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


def recv(sock, device=None, lazy=False):
    """The next message, with message["value"] rebuilt: tensors on `device` (a torch.device; None:
    the CPU), owning their memory; with `lazy`, a tensor sent through CUDA IPC is left where it is,
    as an anvil.batch.Remote (the judge reads from it what it needs). Raises ChannelClosed at EOF,
    and ValueError for anything that does not parse, whatever it makes fail on the way (a key of
    the wrong type, an index out of range, a nesting too deep): what the other side sends is its
    own doing, and the judge calls it a malformed message (hack_suspected / protocol), never a
    failure of its own. The GPU's memory running out while a tensor is rebuilt stays what it is
    (the judge measures whose fault that is)."""
    try:
        data, fds, _flags, _addr = _recv_fds(sock, INLINE_HEADER + 4096, MAX_FDS)
    except (ConnectionResetError, BrokenPipeError) as e:
        raise ChannelClosed(str(e))
    if not data:
        for fd in fds:
            _close(fd)
        raise ChannelClosed("the other side closed the channel")
    try:
        return _parse(data, fds, device, lazy)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - see the docstring
        if _out_of_memory(e):
            raise
        raise ValueError("%s: %s" % (type(e).__name__, str(e)[:300]))


def _out_of_memory(e):
    import sys as _sys

    torch = _sys.modules.get("torch")
    return torch is not None and (isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e))


def _parse(data, fds, device, lazy):
    """recv()'s message from what arrived (closes every descriptor)."""
    try:
        message = _loads(data.decode("utf-8"))
        if _isinstance(message, dict) and "__header__" in message:
            if not fds:
                raise ValueError("a large message came without its memory")
            message = _loads(_read_sealed(fds[0], int(message["__header__"])).decode("utf-8"))
            fds_for_tensors = fds[1:]
        else:
            fds_for_tensors = fds
        if not _isinstance(message, dict):
            raise ValueError("a message is not a JSON object")
        if "value" in message:
            tensors = _read_tensors(fds_for_tensors[0] if fds_for_tensors else None, message.get("tensors") or [],
                                    device, lazy)
            message["value"] = _rebuild(message["value"], tensors)
        return message
    finally:
        for fd in fds:
            _close(fd)


def _read_tensors(fd, layout, device=None, lazy=False):
    import warnings

    import torch

    if not layout:
        return []
    m = size = None
    if any("ipc" not in entry for entry in layout):
        if fd is None:
            raise ValueError("a message with tensors came without their memory")
        if _fcntl(fd, fcntl.F_GET_SEALS) & SEALS != SEALS:
            raise ValueError("tensor memory came unsealed: its sender could still change it")
        size = os.fstat(fd).st_size
        m = _mmap(fd, size, prot=mmap.PROT_READ)
    cuda = device is not None and torch.device(device).type == "cuda"
    out = []
    try:
        for entry in layout:
            dtype = getattr(torch, entry["dtype"], None)
            if not _isinstance(dtype, torch.dtype):
                raise ValueError("unknown dtype %r" % entry["dtype"])
            if lazy and "ipc" in entry:
                from anvil import batch

                ipc = entry["ipc"]
                remote = batch.Remote(str(ipc.get("handle", "")), int(ipc.get("offset", -1)), entry["dtype"],
                                      [int(n) for n in entry["shape"]])
                if remote.numel() * torch.empty(0, dtype=dtype).element_size() != entry["nbytes"]:
                    raise ValueError("a tensor's shape and size disagree")
                out.append(remote)
                continue
            shape = entry["shape"]
            if not _isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
                raise ValueError("a tensor's shape is not a list of sizes")
            nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
            if nbytes != entry["nbytes"]:
                raise ValueError("a tensor's shape and size disagree")
            # Where the bytes lie is checked before anything is allocated for them: a size the
            # sender never had (it could not have shared it) is its lie, not the receiver's lack of
            # memory.
            if "ipc" in entry:
                if not cuda:
                    raise ValueError("a tensor came through CUDA IPC to a receiver without a CUDA device")
                from anvil import cuda_ipc

                ipc = entry["ipc"]
                handle, offset = str(ipc.get("handle", "")), int(ipc.get("offset", -1))
                cuda_ipc.check_range(handle, offset, nbytes)
            elif nbytes and (type(entry["offset"]) is not int or entry["offset"] < 0
                             or entry["offset"] + nbytes > size):
                raise ValueError("a tensor lies outside its memory")
            t = torch.empty(shape, dtype=dtype, device=device)
            if "ipc" in entry:
                cuda_ipc.copy_into(t, handle, offset)
            elif nbytes:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # read-only memory, only ever read from here
                    raw = torch.frombuffer(m, dtype=torch.uint8, count=entry["nbytes"], offset=entry["offset"])
                t.view(-1).view(torch.uint8).copy_(raw)
                del raw
            out.append(t)
        if cuda and m is not None:
            torch.cuda.synchronize()  # the copies read the mapping, which closes below
    finally:
        if m is not None:
            try:
                m.close()
            except BufferError:  # a view is still alive after a failure: the collector unmaps it
                pass
    return out


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


class SharedInputs:
    """The trials' inputs of a defended evaluation: the judge's plan of them (send_plan), and, split
    (Harness.draws_each false: on the CPU by default, or a task whose get_inputs() cannot run on the
    meta device), made half by the judge and half by the candidate's process, so that neither
    makes them all (get_inputs() on the host is often the longest part of an evaluation). Trial i is made by the side whose `parity` is i % 2 (the
    judge: 0, so it makes trial 0 first), which sends the task's own tensors through a sealed
    memfd on `sock`, a socket of their own; the other side rebuilds them on its device. The
    candidate's process makes and sends its trials before any candidate code exists, and the judge
    reads exactly those messages, in order: whatever arrives after them is never read. Anything
    missing or odd (a closed socket, a value that is not plain tensors and values) makes the
    receiver make that trial itself, so the split only ever saves time."""

    def __init__(self, sock, parity, trials):
        self.sock = sock
        self.parity = parity
        self.trials = trials
        self.received = {}
        self.made = {}  # trial -> host inputs made (and sent) ahead, by make_mine()
        self.next_theirs = 1 - parity
        self.closed = False

    def send_plan(self, plan):
        """The judge's plan of the inputs (Harness.plan), which the candidate's process adopts: both
        must draw alike, and each deciding alone could differ (a meta run timed out in one)."""
        try:
            send(self.sock, dict(plan, type="plan"))
        except (ChannelClosed, OSError, ValueError):
            self.closed = True

    def wait_plan(self):
        """The candidate's side of send_plan(): the plan, or None when the judge went away or said
        something else (this process then plans alone)."""
        return self._next("plan")

    def _next(self, kind):
        if self.closed:
            return None
        try:
            msg = recv(self.sock)
        except (ChannelClosed, OSError, ValueError):
            self._shut()
            return None
        if msg.get("type") != kind:
            self._shut()  # out of step
            return None
        return msg

    def _shut(self):
        """Closed for good, both ways: the other side's next read ends (EOF) instead of waiting."""
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- every trial drawn by each process (Harness.draws_each) ----------------------------
    def send_digests(self, digests):
        """The candidate's process: the digests of the trials it drew (harness.trial_digest), for
        the judge to compare with its own."""
        if self.closed:
            return
        try:
            send(self.sock, {"type": "digests", "digests": digests})
        except (ChannelClosed, OSError, ValueError):
            self.closed = True

    def settle_draws(self, ev, mine):
        """The judge: the candidate's process's digests against its own (`mine`, set by set: the
        trials and timing's base sets, Harness.drawn_sets); every set whose draws differ (a
        get_inputs() with state its seed does not reset, a draw that fell back to the host in one
        process only) is sent as the judge drew it (its host copy), after a list of them. Returns
        that list; None when no digests came (the channel is then shut: the other side's read
        ends). A set that differs and cannot cross (not plain tensors and values) raises
        ValueError: the task's inputs cannot be made alike in both processes."""
        msg = self._next("digests")
        theirs = msg.get("digests") if msg is not None else None
        if not isinstance(theirs, list) or len(theirs) != len(mine):
            self._shut()
            return None
        replace = [i for i, d in enumerate(mine) if theirs[i] != d]
        copies = {i: _host_copy(ev.trial_inputs(i)) for i in replace}
        for i, value in copies.items():
            tensors = []
            if not _plain(_rebuild(_skeleton(value, tensors), tensors)):  # as the other side would rebuild it
                self._shut()
                raise ValueError("set %d of the task's inputs differs between the two processes (get_inputs() is not "
                                 "a function of its seed) and cannot be sent across" % i)
        try:
            send(self.sock, {"type": "draws", "replace": replace})
            for i in replace:
                send(self.sock, {"type": "inputs", "trial": i}, copies[i])
        except (ChannelClosed, OSError, ValueError):
            self._shut()
        return replace

    def take_replacements(self, device):
        """The candidate's process: the sets the judge found drawn otherwise here, as the judge
        drew them ({set: inputs on `device`}); {} when the judge went away or shut the channel (the
        candidate's own stay, and the judge's checks see any difference)."""
        msg = self._next("draws")
        replace = msg.get("replace") if msg is not None else None
        out = {}
        for i in replace if isinstance(replace, list) else []:
            value = self._inputs_message(i, device)
            if value is None:
                self.closed = True
                break
            out[i] = value
        return out

    def device_ready(self):
        """The judge's device is set up: the candidate's process, which waits for this before
        starting its own (two CUDA contexts made at once take longer each), may go on."""
        try:
            send(self.sock, {"type": "device_ready"})
        except (ChannelClosed, OSError):
            self.closed = True

    def wait_device_ready(self):
        """The candidate's side of device_ready(); returns at once if the judge went away."""
        if self.closed:
            return
        try:
            msg = recv(self.sock)
        except (ChannelClosed, OSError, ValueError):
            self.closed = True
            return
        if msg.get("type") != "device_ready":
            self.closed = True  # out of step: make every trial here

    def mine(self):
        return [i for i in range(self.trials) if i % 2 == self.parity]

    def make_mine(self, ev):
        """Make this side's trials on the host and send them now (before the device is set up)."""
        self.draw_mine(ev)
        self.send_mine()

    def draw_mine(self, ev):
        """Make this side's trials on the host (no message: a thread of the judge's may do this
        while its other thread starts CUDA and says device_ready on the same socket)."""
        for i in self.mine():
            self.made[i] = ev.host_inputs(ev.trial_seed(i))

    def send_mine(self):
        for i in self.mine():
            if i in self.made:
                self._send(i, self.made[i])

    def take(self, i, ev):
        """Trial i's inputs on ev's device: made here (and sent) if it is ours, else received;
        None when the caller must make them."""
        if not 0 <= i < self.trials:
            return None
        if i % 2 == self.parity:
            host = self.made.pop(i, None)
            if host is None:
                host = ev.host_inputs(ev.trial_seed(i))
                self._send(i, host)
            return ev.to_device(host)
        return self._receive(i, ev.device)

    def _send(self, i, host):
        if self.closed:
            return
        try:
            send(self.sock, {"type": "inputs", "trial": i}, host)
        except (ChannelClosed, OSError, ValueError):
            try:
                send(self.sock, {"type": "inputs", "trial": i, "none": True})
            except (ChannelClosed, OSError):
                self.closed = True

    def _receive(self, i, device):
        while i not in self.received and not self.closed and self.next_theirs < self.trials:
            expected = self.next_theirs
            self.next_theirs += 2
            self.received[expected] = self._inputs_message(expected, device)
        return self.received.pop(i, None)

    def _inputs_message(self, trial, device):
        """The next message as trial `trial`'s inputs on `device`; None when it is anything else (a
        channel that ended is then closed)."""
        try:
            msg = recv(self.sock, device)
        except (ChannelClosed, OSError, ValueError):
            self.closed = True
            return None
        value = msg.get("value")
        if msg.get("type") != "inputs" or msg.get("trial") != trial or msg.get("none") or not _plain(value):
            return None
        return value


def _host_copy(value, depth=0):
    """`value` (a trial's inputs) with every tensor copied to the host, to cross as bytes."""
    import torch

    if _isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if depth < 32 and _isinstance(value, (list, tuple)):
        items = [_host_copy(v, depth + 1) for v in value]
        return items if _isinstance(value, list) else tuple(items)
    if depth < 32 and _isinstance(value, dict):
        return {k: _host_copy(v, depth + 1) for k, v in value.items()}
    return value


def _plain(value, depth=0):
    """A list of tensors and plain values (what get_inputs() returns), rebuilt without Opaque."""
    if _isinstance(value, Opaque) or depth > 32:
        return False
    if _isinstance(value, (list, tuple)):
        return all(_plain(v, depth + 1) for v in value)
    if _isinstance(value, dict):
        return all(_plain(v, depth + 1) for v in value.values())
    return True
