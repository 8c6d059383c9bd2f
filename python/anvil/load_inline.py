"""A drop-in for torch.utils.cpp_extension.load_inline that builds through `anvil build-sources`.

KernelBench-style single-file candidates call load_inline with C++/CUDA source strings. This
writes those sources as torch does (main.cpp with the generated PYBIND11_MODULE, cuda.cu), runs

    anvil build-sources --name NAME --out OUTDIR [--cflag F]... [--cuda-cflag F]...
                        [--ldflag F]... [--include DIR]... main.cpp [cuda.cu]

which prints one JSON object ({"ok": true, "module": PATH, "cached": ...} or {"ok": false,
"diagnostics": ..., "log": ...}), and imports the module it names. Builds thus share anvil's
object and module cache with workdir candidates.

The anvil binary is $ANVIL_BIN, else `anvil` on PATH, else build/anvil of this checkout.
ANVIL_PYTHON is set to this interpreter, so anvil builds against the torch that will load the
module. install() routes torch.utils.cpp_extension.load_inline (and load(), for source files next
to the candidate) here.
"""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

CPP_PRELUDE = ["#include <torch/extension.h>"]
CUDA_PRELUDE = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
_CHECKOUT_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "anvil")

_original = None  # torch's own load_inline, once install() has replaced it
BUILDS = []       # each build this process ran: {"name", "ok", "compiled" (units not from the cache), "seconds"}
_builder = None   # set_builder(): who builds instead of a local `anvil build-sources`


def set_builder(builder):
    """Route builds to builder(spec) -> {"ok", "module"} | {"ok": False, "error"}; spec holds the
    source texts and flags. The evaluator's candidate process uses it: it cannot write anvil's
    cache, so the judge builds for it."""
    global _builder
    _builder = builder


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
SPEC_LISTS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths")


def name_error(name):
    """Why `name` cannot name an extension, or None: it must be a Python identifier (torch's rule
    for an extension's module; it also names directories, so "x/y" or ".." never reaches a path)."""
    if not isinstance(name, str) or not NAME.match(name):
        return "the extension's name %r is not a valid module name (letters, digits and _, not starting with a " \
               "digit, at most 128)" % (name[:128] if isinstance(name, str) else type(name).__name__,)
    return None


def _check_name(name, who):
    why = name_error(name)
    if why is not None:
        raise RuntimeError("Error building extension '%s':\n%s: %s" % (str(name)[:128], who, why))


def spec_error(spec):
    """Why a set_builder() spec (the candidate process's, hence anyone's) cannot be built, or None: a
    name that is not a Python identifier (torch's rule for an extension's module; it also names
    directories, so "x/y" or ".." never reaches a path), texts that are not strings, lists that are
    not lists of strings."""
    if not isinstance(spec, dict):
        return "a build request that is not an object"
    why = name_error(spec.get("name"))
    if why is not None:
        return why
    if spec.get("sources") is not None:
        if not isinstance(spec["sources"], list) or not all(isinstance(p, str) for p in spec["sources"]):
            return "sources: a list of paths is required"
    elif not isinstance(spec.get("cpp_text"), str) or not isinstance(spec.get("cuda_text"), (str, type(None))):
        return "the sources' texts are not strings"
    for key in SPEC_LISTS:
        value = spec.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return "%s: a list of strings is required" % key
    return None


def build_spec_locally(spec, out_dir, root=None):
    """Build a set_builder() spec with `anvil build-sources` into out_dir; returns the reply, whose
    "error" is the whole message load_inline (or load) raises. A load_inline spec carries source
    texts; a load() spec names files by their paths under `root` (the candidate's directory, as
    the judge holds it: never a file the candidate's process names outside it). A spec that does
    not check (spec_error) is refused with its reason, before anything reaches a path."""
    why = spec_error(spec)
    if why is not None:
        name = spec.get("name") if isinstance(spec, dict) and isinstance(spec.get("name"), str) else "?"
        return {"ok": False, "error": "Error building extension '%s':\nanvil.load_inline: %s" % (name[:128], why)}
    anvil = find_anvil()
    if anvil is None:
        return {"ok": False, "error": "Error building extension '%s':\nanvil.load_inline: the anvil binary was not "
                                      "found" % spec["name"]}
    source_dir = None
    try:
        headers = ()
        includes = spec.get("extra_include_paths")
        if spec.get("sources") is not None:
            sources = [inside(root, path, "source") for path in _as_list(spec["sources"])]
            headers, includes = load_headers(sources, includes, root)
        else:
            source_dir = tempfile.mkdtemp(prefix="anvil_inline_%s_" % spec["name"])
            sources = write_sources(source_dir, spec["cpp_text"], spec.get("cuda_text"))
        os.makedirs(out_dir, exist_ok=True)
        argv = build_command(anvil, spec["name"], out_dir, sources, spec.get("extra_cflags"),
                             spec.get("extra_cuda_cflags"), spec.get("extra_ldflags"),
                             includes, headers)
        return {"ok": True, "module": run_build(argv, spec["name"], False)}
    except (RuntimeError, ValueError) as e:
        return {"ok": False, "error": str(e) if str(e).startswith("Error building") else
                "Error building extension '%s':\n%s" % (spec["name"], e)}
    finally:
        if source_dir is not None:
            shutil.rmtree(source_dir, ignore_errors=True)


SIBLINGS = ("anvil copies the C/C++/CUDA sources and headers next to a single-file candidate (its directory and "
            "two levels below), docs/protocols.md")


HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".hxx", ".cuh", ".inl", ".inc")


def headers_beside(sources, include_dirs=()):
    """The headers in the sources' directories and in `include_dirs` (not below), which a source
    includes by name (`#include "kernel.cuh"`): build-sources stages them beside the sources."""
    found, seen = [], set()
    directories = [os.path.dirname(os.path.abspath(s)) for s in sources] + [os.path.abspath(d) for d in include_dirs]
    for directory in directories:
        if directory in seen:
            continue
        seen.add(directory)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            if name.endswith(HEADER_SUFFIXES) and os.path.isfile(path) and not os.path.islink(path):
                found.append(path)
    return found


def load_headers(sources, include_paths, root):
    """(headers to stage, include paths to pass) for a load() of `sources`: the headers beside the
    sources and in the relative include paths (resolved in `root`, the candidate's own), which the
    stage puts where a source's `#include "name.h"` finds them; absolute include paths (the
    toolchain's) pass as given. root=None (a local build): relative paths from the working
    directory, wherever they lead."""
    relative = [inside(root, p, "include path") if root is not None else os.path.abspath(str(p))
                for p in _as_list(include_paths) if not os.path.isabs(str(p))]
    absolute = [p for p in _as_list(include_paths) if os.path.isabs(str(p))]
    return headers_beside(sources, relative), absolute


def inside(root, path, what):
    """The real path of `path` (relative to `root`, or absolute) when it lies inside `root`; else
    ValueError naming it. A load() spec's files must be the candidate's own."""
    if root is None:
        raise ValueError("anvil.load: no candidate directory to take the %s %s from" % (what, path))
    base = os.path.realpath(root)
    full = os.path.realpath(os.path.join(base, str(path)))
    if full != base and not full.startswith(base.rstrip("/") + "/"):
        raise ValueError("anvil.load: the %s %s is not inside the candidate's directory: load() builds the "
                         "candidate's own files (%s)" % (what, path, SIBLINGS))
    if what == "source" and not os.path.isfile(full):
        raise ValueError("anvil.load: the source %s was not found beside the candidate (%s)" % (path, SIBLINGS))
    return full


def find_anvil():
    """Path of the anvil binary, or None."""
    if os.environ.get("ANVIL_BIN"):
        return os.environ["ANVIL_BIN"]
    on_path = shutil.which("anvil")
    if on_path:
        return on_path
    checkout = os.path.normpath(_CHECKOUT_BIN)
    return checkout if os.access(checkout, os.X_OK) else None


def _as_list(sources):
    if sources is None:
        return []
    return [sources] if isinstance(sources, str) else list(sources)


def _c_string(text):
    return '"%s"' % str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def module_definition(functions, with_pytorch_error_handling=True):
    """The PYBIND11_MODULE block binding `functions` (a name, a list of names, or name -> doc)."""
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, (list, tuple)):
        functions = {f: f for f in functions}
    elif not isinstance(functions, dict):
        raise ValueError("Expected 'functions' to be a list or dict, but was %s" % type(functions))
    lines = ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    for name, doc in functions.items():
        target = "torch::wrap_pybind_function(%s)" % name if with_pytorch_error_handling else name
        lines.append("m.def(%s, %s, %s);" % (_c_string(name), target, _c_string(doc)))
    lines.append("}")
    return lines


def source_texts(cpp_sources, cuda_sources=None, functions=None, with_pytorch_error_handling=True,
                 no_implicit_headers=False):
    """(main.cpp text, cuda.cu text or None), laid out as torch's load_inline writes them."""
    cpp = ([] if no_implicit_headers else CPP_PRELUDE) + _as_list(cpp_sources)
    if functions is not None:
        cpp += module_definition(functions, with_pytorch_error_handling)
    cuda = _as_list(cuda_sources)
    cuda_text = None
    if cuda:
        cuda_text = "\n".join(([] if no_implicit_headers else CUDA_PRELUDE) + cuda) + "\n"
    return "\n".join(cpp) + "\n", cuda_text


def write_sources(directory, cpp_text, cuda_text=None):
    """Write main.cpp (and cuda.cu) into `directory`; return their paths."""
    paths = [os.path.join(directory, "main.cpp")]
    with open(paths[0], "w", encoding="utf-8") as f:
        f.write(cpp_text)
    if cuda_text is not None:
        paths.append(os.path.join(directory, "cuda.cu"))
        with open(paths[1], "w", encoding="utf-8") as f:
            f.write(cuda_text)
    return paths


def build_command(anvil, name, out_dir, sources, extra_cflags=None, extra_cuda_cflags=None,
                  extra_ldflags=None, extra_include_paths=None, headers=()):
    """The argv of `anvil build-sources` for these sources, headers (staged beside them) and flags."""
    argv = [anvil, "build-sources", "--name", name, "--out", out_dir]
    for header in headers:
        argv += ["--header", header]
    for option, values in (("--cflag", extra_cflags), ("--cuda-cflag", extra_cuda_cflags),
                           ("--ldflag", extra_ldflags), ("--include", extra_include_paths)):
        for value in _as_list(values):
            if str(value).strip():  # KernelBench passes extra_cflags=[""]: nothing to pass on
                argv += [option, value]
    return argv + list(sources)


def _parse_reply(stdout):
    """The JSON object anvil printed (the whole output, else its last line), or None."""
    for text in (stdout, (stdout.strip().splitlines() or [""])[-1]):
        try:
            reply = json.loads(text)
        except ValueError:
            continue
        if isinstance(reply, dict):
            return reply
    return None


def run_build(argv, name, verbose=False):
    """Run `anvil build-sources`; return the module path or raise RuntimeError."""
    env = dict(os.environ, ANVIL_PYTHON=sys.executable)
    if verbose:
        print("anvil.load_inline: " + " ".join(argv), file=sys.stderr)
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=None if verbose else subprocess.PIPE,
                              text=True, env=env)
    except OSError as e:
        raise RuntimeError("Error building extension '%s': cannot run %s: %s" % (name, argv[0], e))
    reply = _parse_reply(proc.stdout)
    BUILDS.append({"name": name, "ok": bool(reply and reply.get("ok") and reply.get("module")),
                   "compiled": reply.get("compiled") if reply else None, "seconds": reply.get("seconds") if reply else None})
    if reply is None:
        raise RuntimeError("Error building extension '%s': %s exited with status %d and printed no "
                           "JSON reply\n%s" % (name, argv[0], proc.returncode,
                                               (proc.stderr or proc.stdout or "").strip()[-4000:]))
    if not reply.get("ok") or not reply.get("module"):
        message = reply.get("diagnostics") or reply.get("error") or "anvil reported a failure"
        if reply.get("log"):
            message += "\n(full build log: %s)" % reply["log"]
        raise RuntimeError("Error building extension '%s':\n%s" % (name, message))
    if verbose:
        print("anvil.load_inline: %s (%s)" % (reply["module"], "cached" if reply.get("cached") else "built"),
              file=sys.stderr)
    return reply["module"]


def import_module(name, path):
    """Import the extension module `name` from the file `path`."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError("cannot import extension '%s' from %s" % (name, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None,
                extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None,
                build_directory=None, verbose=False, with_cuda=None, is_python_module=True,
                with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False,
                no_implicit_headers=False, **ignored):
    """torch.utils.cpp_extension.load_inline, built by `anvil build-sources`.

    Sources go to a fresh temporary directory; the module to `build_directory` when given (else
    beside the sources). with_cuda follows from the presence of CUDA sources (anvil links the
    CUDA libraries when a .cu file is given); use_pch and unknown keyword arguments are ignored
    (anvil keeps its own precompiled headers). is_python_module=False loads the library with
    torch.ops.load_library and returns its path, as torch does.
    """
    if ignored.get("is_standalone") or ignored.get("sycl_sources"):
        raise ValueError("anvil.load_inline: is_standalone and sycl_sources are not supported")
    cpp_text, cuda_text = source_texts(cpp_sources, cuda_sources, functions,
                                       with_pytorch_error_handling, no_implicit_headers)
    _check_name(name, "anvil.load_inline")
    if _builder is not None:
        reply = _builder({"name": name, "cpp_text": cpp_text, "cuda_text": cuda_text,
                          "extra_cflags": _as_list(extra_cflags), "extra_cuda_cflags": _as_list(extra_cuda_cflags),
                          "extra_ldflags": _as_list(extra_ldflags),
                          "extra_include_paths": _as_list(extra_include_paths)})
        return _built(name, reply, is_python_module)
    anvil = find_anvil()
    if anvil is None:
        raise RuntimeError("anvil.load_inline: the anvil binary was not found (set ANVIL_BIN, put "
                           "anvil on PATH, or build it into %s)" % os.path.normpath(_CHECKOUT_BIN))
    source_dir = tempfile.mkdtemp(prefix="anvil_inline_%s_" % name)
    out_dir = build_directory or source_dir
    os.makedirs(out_dir, exist_ok=True)
    sources = write_sources(source_dir, cpp_text, cuda_text)
    argv = build_command(anvil, name, out_dir, sources, extra_cflags, extra_cuda_cflags,
                         extra_ldflags, extra_include_paths)
    try:
        path = run_build(argv, name, verbose)
    finally:
        if not keep_intermediates:
            for source in sources:
                os.remove(source)
    return _loaded(name, path, is_python_module)


def load(name, sources, extra_cflags=None, extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None,
         build_directory=None, verbose=False, with_cuda=None, is_python_module=True, keep_intermediates=True,
         **ignored):
    """torch.utils.cpp_extension.load, built by `anvil build-sources`: the sources are files (a
    path or a list; relative ones from the working directory, a candidate's own), built as given.
    In an evaluation the judge builds them from its copy of the candidate's directory."""
    if ignored.get("is_standalone") or ignored.get("sycl_sources"):
        raise ValueError("anvil.load: is_standalone and sycl_sources are not supported")
    paths = _as_list(sources)
    if not paths:
        raise ValueError("anvil.load: no sources given")
    _check_name(name, "anvil.load")
    if _builder is not None:
        cwd = os.getcwd()
        spec = {"name": name, "sources": [os.path.relpath(inside(cwd, p, "source"), os.path.realpath(cwd))
                                          for p in paths],
                "extra_cflags": _as_list(extra_cflags), "extra_cuda_cflags": _as_list(extra_cuda_cflags),
                "extra_ldflags": _as_list(extra_ldflags), "extra_include_paths": _as_list(extra_include_paths)}
        return _built(name, _builder(spec), is_python_module)
    anvil = find_anvil()
    if anvil is None:
        raise RuntimeError("anvil.load: the anvil binary was not found (set ANVIL_BIN, put anvil on PATH, or build "
                           "it into %s)" % os.path.normpath(_CHECKOUT_BIN))
    out_dir = build_directory or tempfile.mkdtemp(prefix="anvil_load_%s_" % name)
    os.makedirs(out_dir, exist_ok=True)
    sources = [os.path.abspath(p) for p in paths]
    headers, includes = load_headers(sources, extra_include_paths, None)
    argv = build_command(anvil, name, out_dir, sources, extra_cflags, extra_cuda_cflags, extra_ldflags, includes,
                         headers)
    return _loaded(name, run_build(argv, name, verbose), is_python_module)


def _built(name, reply, is_python_module):
    """The module (or library path) a builder's reply names; RuntimeError with its message."""
    if not reply.get("ok") or not reply.get("module"):
        raise RuntimeError(str(reply.get("error") or "Error building extension '%s':\nbuild failed" % name))
    return _loaded(name, reply["module"], is_python_module)


def _loaded(name, path, is_python_module):
    import torch  # the module's libtorch dependencies resolve against the loaded torch

    if not is_python_module:
        torch.ops.load_library(path)
        return path
    return import_module(name, path)


def install():
    """Replace torch.utils.cpp_extension's load_inline and load with anvil's; return torch's
    original load_inline."""
    global _original
    from torch.utils import cpp_extension

    if _original is None:
        _original = cpp_extension.load_inline
    cpp_extension.load_inline = load_inline
    cpp_extension.load = load
    return _original
