"""What a candidate's forward may do, and the instruments that watch it (docs/anti-hacking.md).

The torch-op policy is data: a dict with
    "allowed_ops":  ATen op names (no overload) the candidate may call: tensor creation, views and
                    metadata, and data movement (a copy computes nothing);
    "libraries":    library kernels the candidate may launch from its own C++ ("cublas", "cudnn"),
                    which count as its own work;
    "own_work_min": the least share of GPU time its own (and allowed library) kernels must take;
    "torch_ops":    true: any torch op may compute (KernelBench's rule): nothing is forbidden;
    "own_work":     false: the candidate's own kernels need not run nor take own_work_min.
DEFAULT_POLICY is CUDA-Agent's rule: no torch compute at all, cuBLAS and cuDNN from C++ only. The
protocol (src/anvil/env/protocol.h) sets torch_ops and own_work.

OpRecorder is a TorchDispatchMode that records every ATen op reaching the dispatcher while the
candidate runs (from Python or from its C++ extension) and lets it run; the verdict is made later,
so a candidate cannot catch a refusal and try something else. The profiler trace of the timed calls
is the second, independent layer (analyze_trace): the CPU-side `aten::` events it records come from
RecordFunction, which a candidate that disables dispatch modes still passes through.

Fingerprint captures, before the candidate is imported, the identity of everything the candidate's
process uses to judge (anvil's modules, their functions' code, and the torch, time, json, socket
and builtins attributes it calls) and later names whatever was replaced. threads() lists the
process's OS threads.
"""
import os
import re
import sys
import types

VIEW_OPS = [
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "expand", "expand_as", "permute",
    "transpose", "t", "squeeze", "unsqueeze", "flatten", "unflatten", "select", "slice", "narrow", "split",
    "split_with_sizes", "chunk", "unbind", "alias", "detach", "view_as", "movedim", "diagonal", "unfold",
    "view_as_real", "view_as_complex", "_unsafe_split", "squeeze_", "unsqueeze_", "transpose_", "t_",
    "as_strided_", "detach_", "_neg_view", "_conj",
]
CREATION_OPS = [
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "ones",
    "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "scalar_tensor", "lift_fresh",
    "lift_fresh_copy", "arange", "fill_", "zero_", "resize_", "set_", "empty_permuted",
]
MOVEMENT_OPS = ["clone", "copy_", "_to_copy", "to", "contiguous", "_copy_from", "_copy_from_and_resize"]
METADATA_OPS = ["size", "stride", "sym_size", "sym_stride", "is_contiguous", "dim", "numel", "sym_numel",
                "_local_scalar_dense", "item", "is_same_size", "requires_grad_", "_has_compatible_shallow_copy_type",
                "record_stream", "is_pinned"]

DEFAULT_POLICY = {
    "allowed_ops": sorted(set(VIEW_OPS + CREATION_OPS + MOVEMENT_OPS + METADATA_OPS)),
    "libraries": ["cublas", "cudnn"],
    "own_work_min": 0.9,
    "torch_ops": False,
    "own_work": True,
}

# Kernel names that mark torch's own kernels (ATen, c10, inductor's Triton), never the candidate's.
TORCH_KERNEL_MARKS = ("at::", "c10::", "triton_", "_Z2at", "_ZN2at", "_ZN3c10", "at_cuda_detail")
# Kernels that only write a constant (torch's creation ops: zeros, ones, full, fill_; a memset):
# allocation, not work. They count in the time like any kernel, but not against the own-work
# share, so a binding that makes its output with torch::zeros_like is not foreign work.
FILL_KERNEL_MARKS = ("at::native::FillFunctor",)
# Kernels of the harness itself, launched on the current stream before each profiled call.
MARKER_KERNEL = "spin_kernel"


def op_name(func):
    """"aten::mm" for aten.mm.default."""
    try:
        packet = func.overloadpacket
        return "%s::%s" % (getattr(packet, "_qualified_op_name", "aten::x").split("::")[0], packet.__name__)
    except AttributeError:
        return str(func)


def bare(name):
    return name.split("::", 1)[-1]


def forbidden(pol, ops):
    """The ops of `ops` ({name: count}) that the policy forbids: none when torch ops are allowed."""
    return {} if pol.get("torch_ops") else dict(ops or {})


def make_recorder(allowed):
    """An OpRecorder instance (a TorchDispatchMode) allowing the bare op names in `allowed`."""
    from torch.utils._python_dispatch import TorchDispatchMode

    allowed = frozenset(allowed)

    class OpRecorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.forbidden = {}
            self.calls = 0

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            self.calls += 1
            name = op_name(func)
            if bare(name) not in allowed:
                self.forbidden[name] = self.forbidden.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    return OpRecorder()


def threads():
    """The ids of this process's OS threads."""
    try:
        return set(os.listdir("/proc/self/task"))
    except OSError:
        return set()


def last_pid():
    """The last process or thread id this PID namespace handed out (/proc/sys/kernel/ns_last_pid),
    or None where it cannot be read. The candidate's process is alone in its namespace (its init
    only waits), so a change across one of its calls means the call started a thread or a process,
    joined or gone by the time the thread list is taken (threads() sees only what lingers)."""
    try:
        with open("/proc/sys/kernel/ns_last_pid") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


_WALL = 0x40000000  # waitid's __WALL: children of every kind, clone()d ones with another exit signal too


def has_children():
    """Whether this process has a child, running or ended and not yet reaped (one waitid, which
    sees the children of every thread of the process); children() lists them."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT | _WALL)
    except ChildProcessError:
        return False
    except OSError:
        return bool(children())
    return True


def children(pid="self"):
    """The pids of a process's children (/proc/PID/task/*/children); an empty set where the
    kernel does not list them."""
    out = set()
    try:
        tasks = os.listdir("/proc/%s/task" % pid)
    except OSError:
        return out
    for tid in tasks:
        try:
            with open("/proc/%s/task/%s/children" % (pid, tid)) as f:
                out.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            pass
    return out


def descendants(pid="self"):
    """Every process below `pid`, children first."""
    found, todo = [], list(children(pid))
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children(p))
    return found


def thread_names(tids):
    names = []
    for tid in sorted(tids):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                names.append("%s (%s)" % (tid, f.read().strip()))
        except OSError:
            pass  # gone since
    return names


# -- fingerprint ------------------------------------------------------------------------------

# (module name, attribute path) pairs whose identity is captured; a missing one is skipped.
WATCHED = [
    ("builtins", n) for n in ("len", "isinstance", "type", "sorted", "min", "max", "sum", "abs", "round", "float",
                              "int", "range", "list", "dict", "tuple", "zip", "enumerate", "getattr", "setattr",
                              "hasattr", "iter", "next", "repr", "str", "bool", "any", "all", "map", "id",
                              "__import__", "print", "open", "super", "object")
] + [
    ("time", "perf_counter"), ("time", "perf_counter_ns"), ("time", "monotonic"), ("time", "time"),
    ("json", "dumps"), ("json", "loads"), ("os", "write"), ("os", "read"), ("os", "listdir"), ("os", "_exit"),
    ("socket", "socket"), ("socket", "socket.sendmsg"), ("socket", "socket.send"), ("socket", "recv_fds"),
    ("socket", "socket.recvmsg"), ("mmap", "mmap"), ("gc", "collect"), ("sys", "exit"),
    ("torch", "Tensor"), ("torch", "empty"), ("torch", "empty_like"), ("torch", "frombuffer"),
    ("torch", "manual_seed"), ("torch", "allclose"), ("torch", "equal"), ("torch", "isfinite"), ("torch", "device"),
    ("torch", "no_grad"), ("torch", "testing.assert_close"), ("torch", "roll"),
    ("torch", "Tensor.clone"), ("torch", "Tensor.copy_"), ("torch", "Tensor.to"), ("torch", "Tensor.sum"),
    ("torch", "Tensor.abs"), ("torch", "Tensor.double"), ("torch", "Tensor.item"), ("torch", "Tensor.view"),
    ("torch", "Tensor.reshape"), ("torch", "Tensor.numel"), ("torch", "Tensor.element_size"),
    ("torch", "Tensor.contiguous"), ("torch", "Tensor.fill_"), ("torch", "Tensor.zero_"), ("torch", "Tensor.detach"),
    ("torch", "Tensor.data_ptr"), ("torch", "Tensor.eq"), ("torch", "Tensor.ne"), ("torch", "Tensor.__eq__"),
    ("torch", "Tensor.__ne__"), ("torch", "Tensor.all"), ("torch", "Tensor.any"), ("torch", "Tensor.isnan"),
    ("torch", "Tensor.__torch_function__"), ("torch", "Tensor.__torch_dispatch__"),
    ("torch", "cuda.synchronize"), ("torch", "cuda.Event"), ("torch", "cuda.Event.record"),
    ("torch", "cuda.Event.elapsed_time"), ("torch", "cuda.Event.synchronize"), ("torch", "cuda.Event.query"),
    ("torch", "cuda._sleep"), ("torch", "cuda.current_stream"), ("torch", "cuda.set_stream"),
    ("torch", "cuda.memory_snapshot"), ("torch", "cuda.empty_cache"), ("torch", "cuda.get_device_properties"),
    ("torch", "profiler.profile"), ("torch", "profiler.profile.__enter__"), ("torch", "profiler.profile.__exit__"),
    ("torch", "profiler.profile.start"), ("torch", "profiler.profile.stop"), ("torch", "profiler.ProfilerActivity"),
    ("torch", "autograd._disable_profiler"),
    ("torch", "autograd._enable_profiler"), ("torch", "autograd._prepare_profiler"),
    ("torch", "utils._python_dispatch.TorchDispatchMode"), ("torch", "utils._python_dispatch._push_mode"),
    ("torch", "utils._python_dispatch._pop_mode"), ("torch", "utils._python_dispatch._get_current_dispatch_mode"),
    ("torch", "_C._push_on_torch_dispatch_stack"), ("torch", "_C._pop_torch_dispatch_stack"),
    ("torch", "_C._len_torch_dispatch_stack"), ("torch", "_C._get_dispatch_stack_at"),
    ("torch", "_C._DisableTorchDispatch"), ("torch", "nn.Module.__call__"), ("torch", "nn.Module._call_impl"),
    ("torch", "backends.cuda.matmul"), ("torch", "backends.cudnn"),
]


def _lookup(owner, attr):
    """owner's own attribute (from its __dict__ when it has one, so a class attribute and not a
    bound method is compared), else getattr; None when absent."""
    if isinstance(owner, dict):
        return owner.get(attr)
    d = getattr(owner, "__dict__", None)
    if isinstance(d, (dict, types.MappingProxyType)) and attr in d:
        return d[attr]
    return getattr(owner, attr, None)


def _resolve(module, path):
    owner = sys.modules.get(module)
    parts = path.split(".")
    for part in parts[:-1]:
        if owner is None:
            return None, None, None
        owner = getattr(owner, part, None)
    if owner is None:
        return None, None, None
    return owner, parts[-1], _lookup(owner, parts[-1])


class Fingerprint:
    """Identities of the judging code, captured at construction; changed() lists what differs."""

    def __init__(self, module_prefixes=("anvil",)):
        self.entries = []  # (label, owner, attribute, object)
        for module, path in WATCHED:
            owner, attr, obj = _resolve(module, path)
            if owner is not None and obj is not None:
                self.entries.append(("%s.%s" % (module, path), owner, attr, obj))
        self.codes = []  # (label, function, code, defaults, kwdefaults)
        for name, module in list(sys.modules.items()):
            if not any(name == p or name.startswith(p + ".") for p in module_prefixes):
                continue
            if not isinstance(module, types.ModuleType):
                continue
            snapshot = dict(vars(module))
            self.entries.append((name, sys.modules, name, module))
            for attr, value in snapshot.items():
                if attr.startswith("__") and attr not in ("__dict__",):
                    continue
                self.entries.append(("%s.%s" % (name, attr), module, attr, value))
                for label, fn in self._functions(name + "." + attr, value):
                    self.codes.append((label, fn, fn.__code__, fn.__defaults__, fn.__kwdefaults__))
        # What changed() reads: an entry that is the owner's own attribute is read from the owner's
        # namespace (a module's dict, a class's live mappingproxy, sys.modules), the rest with getattr.
        self.own = []      # (label, namespace, attribute, object)
        self.lookups = []  # (label, owner, attribute, object)
        for label, owner, attr, obj in self.entries:
            space = owner if isinstance(owner, dict) else getattr(owner, "__dict__", None)
            if isinstance(space, (dict, types.MappingProxyType)) and attr in space:
                self.own.append((label, space, attr, obj))
            else:
                self.lookups.append((label, owner, attr, obj))

    @staticmethod
    def _functions(label, value):
        if isinstance(value, types.FunctionType):
            yield label, value
        elif isinstance(value, type) and value.__module__.startswith("anvil"):
            for attr, member in vars(value).items():
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if isinstance(member, types.FunctionType):
                    yield "%s.%s" % (label, attr), member

    def changed(self):
        """Labels of what was replaced, added to a watched module, or rewritten in place (a check
        the candidate's process makes after every call: it reads each entry once)."""
        out = [label for label, space, attr, obj in self.own if space.get(attr) is not obj]
        for label, owner, attr, obj in self.lookups:
            try:
                now = _lookup(owner, attr)
            except Exception:  # noqa: BLE001 - a property that raises is a change too
                now = None
            if now is not obj:
                out.append(label)
        out += [label + " (code)" for label, fn, code, defaults, kwdefaults in self.codes
                if fn.__code__ is not code or fn.__defaults__ is not defaults or fn.__kwdefaults__ is not kwdefaults]
        return sorted(set(out))


# -- profiler trace ---------------------------------------------------------------------------

def is_torch_kernel(name):
    # "PyTorch" in any case: torch's memory-efficient attention (PyTorchMemEffAttention::AttentionKernel)
    return any(mark in name for mark in TORCH_KERNEL_MARKS) or "pytorch" in name.lower()


def base_name(name):
    """A kernel's identifier without return type, namespace noise, template arguments or
    parameters: "void foo::bar<128>(float*)" -> "bar"."""
    return qualified_name(name).split("::")[-1]


def qualified_name(name):
    """A kernel's name with its namespaces, without return type, template arguments or parameters:
    "void foo::bar<128>(float*)" -> "foo::bar"; an anonymous namespace is one like any other
    ("void (anonymous namespace)::k(float*)" -> "(anonymous namespace)::k", base name "k")."""
    depth = 0
    out = []
    for ch in name.replace("(anonymous namespace)", "\0"):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0:
            break
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip().split(" ")[-1].replace("\0", "(anonymous namespace)")


def kernel_kind(name, own_names):
    """own (the candidate's), fill (a constant written: FILL_KERNEL_MARKS or a memset), copy (a
    memcpy), torch (ATen's, inductor's) or library (cuBLAS, cuDNN and the like)."""
    if own_kernel(name, own_names):
        return "own"
    if any(mark in name for mark in FILL_KERNEL_MARKS) or name.lower().startswith("memset"):
        return "fill"
    if is_torch_kernel(name):
        return "torch"
    return "copy" if name.lower().startswith("memcpy") else "library"


# torch's own kernels by where they live, never the candidate's whatever it names its own: ATen's
# and c10's namespaces (demangled or mangled), inductor's generated Triton ("triton_poi_fused_add_0").
# Only the kernel's own qualified name counts: a kernel of the candidate's templated on c10::Half
# ("void my_kernel<c10::Half>(c10::Half*)") lives in no namespace of torch's.
TORCH_HOMES = ("at::", "c10::", "_ZN2at", "_ZN3c10", "_Z2at")
INDUCTOR_KERNEL = re.compile(r"triton_[a-z]{3}_fused")


def torch_home(name):
    q = qualified_name(name)
    return q.startswith(TORCH_HOMES) or INDUCTOR_KERNEL.match(q) is not None


def own_kernel(name, own_names):
    """Whether a traced kernel name is one of the candidate's (own_names: demangled or base names
    of the kernels in its modules). A kernel of torch's (torch_home) never is: a module that
    holds a kernel it names vectorized_elementwise_kernel (or at::native::..., or
    triton_poi_fused_add_0) does not make ATen's or inductor's kernels of that name its own work."""
    if torch_home(name):
        return False
    return name in own_names or base_name(name) in own_names


def analyze_trace(kernels, cpu_ops, own_names, policy, marker_stream=None, calls=1):
    """Proof of work from one profiled run of `calls` candidate calls.

    kernels: [{"name", "stream", "us", "joined"}] for every GPU activity (kernels, memcpy, memset);
    a kernel of another stream than the marker's is side-stream work, unless it was joined (ended
    before its call's closing marker on the call's stream began: anvil.timing._read_trace) where
    the policy asks no own work;
    cpu_ops: names of the CPU-side ATen ops recorded during the calls. Returns
    {"own_us", "library_us", "torch_us", "fill_us", "other_us", "total_us", "own_share", "streams",
     "forbidden_ops", "side_stream_kernels", "kernels": top 10 by time}. own_share leaves fills out
    (kernel_kind); total_us has them."""
    allowed = set(policy.get("allowed_ops", ()))
    # Where torch compute is the candidate's to use (own_work off: kernelbench), torch's own ops run
    # on streams of their own and join them (cuDNN's grouped convolutions, its LSTM): joined work of
    # another stream is no side stream there. Under own_work (cuda-agent) its kernels run on one stream.
    joins_allowed = not policy.get("own_work", True)
    libraries_ok = bool(policy.get("libraries"))
    own_us = lib_us = torch_us = fill_us = other_us = 0.0
    by_name = {}
    side = {}
    streams = set()
    for k in kernels:
        name, us = k["name"], float(k["us"])
        if MARKER_KERNEL in name:
            continue
        kind = kernel_kind(name, own_names)
        if kind == "own":
            own_us += us
        elif kind == "library":
            lib_us += us
        elif kind == "torch":
            torch_us += us
        elif kind == "fill":
            fill_us += us
        else:
            other_us += us
        streams.add(k.get("stream"))
        if marker_stream is not None and k.get("stream") != marker_stream and kind not in ("copy", "fill") \
                and not (joins_allowed and k.get("joined")):
            side[name] = side.get(name, 0) + 1
        entry = by_name.setdefault(name, {"name": name, "kind": kind, "us": 0.0, "count": 0})
        entry["us"] += us
        entry["count"] += 1
    work = own_us + lib_us + torch_us + other_us
    credited = own_us + (lib_us if libraries_ok else 0.0)
    forbidden = {}
    for op in cpu_ops:
        if op.startswith("aten::") and bare(op) not in allowed:
            forbidden[op] = forbidden.get(op, 0) + 1
    top = sorted(by_name.values(), key=lambda e: -e["us"])[:10]
    for e in top:
        e["us_per_call"] = round(e.pop("us") / max(calls, 1), 3)
    return {"own_us": own_us / max(calls, 1), "library_us": lib_us / max(calls, 1),
            "torch_us": torch_us / max(calls, 1), "other_us": other_us / max(calls, 1),
            "fill_us": fill_us / max(calls, 1), "total_us": (work + fill_us) / max(calls, 1),
            "own_share": (credited / work) if work > 0 else None,
            "streams": len(streams), "forbidden_ops": forbidden, "side_stream_kernels": side, "kernels": top}
