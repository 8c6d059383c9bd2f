"""python -m anvil.probe_env: what a torch extension build needs to know about this interpreter.

Prints one JSON object:
  python   {executable, version, include_dir, ext_suffix}
  torch    {version, cuda, include_paths, library_dir, libraries, cxx11_abi, pybind11_flags,
            version_file}
  cudnn    {include_dir, library_dir, library, version} or null
  cublas   {include_dir, library_dir, library} or null
  gpus     [{index, name, capability, memory_bytes}]   (empty without a usable CUDA device)
  driver   the NVIDIA driver version string, or null
  errors   {section: "Type: message"} for each section that could not be probed
Any piece that cannot be found is null; the probe itself never fails because one is missing.

cuDNN and cuBLAS are searched in the CUDA toolkit first (its headers are the ones nvcc already
sees), then /usr/local and the system directories, then the nvidia/* pip packages next to torch.
`library` is the versioned file name (libcudnn.so.9): pip wheels ship no unversioned symlink, so
the linker must be given `-l:libcudnn.so.9`.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from anvil._cli import emit, quiet_stdout

SYSTEM_LIB_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]


def probe_python():
    return {
        "executable": os.path.abspath(sys.executable),
        "version": "%d.%d.%d" % sys.version_info[:3],
        "include_dir": sysconfig.get_paths().get("include"),
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
    }


def probe_torch(errors):
    import torch

    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    has_cuda = torch.version.cuda is not None
    libraries = ["c10", "torch", "torch_cpu", "torch_python"]
    if has_cuda:
        libraries += ["c10_cuda", "torch_cuda"]
    version_file = os.path.join(torch_dir, "version.py")
    abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)
    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "include_paths": _guard(errors, "torch.include_paths", lambda: _torch_include_paths(has_cuda)),
        "library_dir": os.path.join(torch_dir, "lib"),
        "libraries": libraries,
        "cxx11_abi": None if abi is None else bool(abi),
        "pybind11_flags": _pybind11_flags(torch),
        "version_file": version_file if os.path.isfile(version_file) else None,
    }


def _torch_include_paths(has_cuda):
    from torch.utils import cpp_extension

    return cpp_extension.include_paths("cuda" if has_cuda else "cpu")


def _pybind11_flags(torch):
    """The -DPYBIND11_* defines older torch passes to keep extensions ABI-compatible with it.

    torch >= 2.10 dropped the _PYBIND11_* attributes (pybind11 handles its ABI itself), so this
    is often an empty list."""
    flags = []
    for key in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
        value = getattr(torch._C, "_PYBIND11_" + key, None)
        if value is not None:
            flags.append('-DPYBIND11_%s="%s"' % (key, value))
    return flags


def _cuda_home():
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.environ[var]
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(nvcc))
    return "/usr/local/cuda" if os.path.isdir("/usr/local/cuda") else None


def _pip_nvidia_roots():
    """site-packages/nvidia of the interpreter, where torch's CUDA wheels put their libraries."""
    roots = []
    for entry in sys.path:
        root = os.path.join(entry or ".", "nvidia")
        if os.path.isdir(root) and root not in roots:
            roots.append(root)
    return roots


def _search_dirs(pip_packages):
    """(include_dir, [library_dirs]) pairs in search order; see the module docstring."""
    pairs = []
    home = _cuda_home()
    if home:
        for inc in ("include", "targets/x86_64-linux/include"):
            pairs.append((os.path.join(home, inc),
                          [os.path.join(home, d) for d in ("lib64", "lib", "targets/x86_64-linux/lib")]))
    pairs.append(("/usr/local/include", ["/usr/local/lib"]))
    pairs.append(("/usr/include", SYSTEM_LIB_DIRS))
    for root in _pip_nvidia_roots():
        for package in pip_packages:
            for pkg_dir in sorted(glob.glob(os.path.join(root, package))):
                pairs.append((os.path.join(pkg_dir, "include"), [os.path.join(pkg_dir, "lib")]))
    return pairs


def _find_library(lib_dirs, stem):
    """(dir, file) of lib<stem>.so.<major> (or lib<stem>.so) in the first directory holding one."""
    versioned = re.compile(r"^lib%s\.so\.(\d+)$" % re.escape(stem))
    for lib_dir in lib_dirs:
        if not os.path.isdir(lib_dir):
            continue
        names = sorted((n for n in os.listdir(lib_dir) if versioned.match(n)),
                       key=lambda n: int(versioned.match(n).group(1)), reverse=True)
        if names:
            return lib_dir, names[0]
        if os.path.exists(os.path.join(lib_dir, "lib%s.so" % stem)):
            return lib_dir, "lib%s.so" % stem
    return None, None


def _find(header, stem, pip_packages):
    for include_dir, lib_dirs in _search_dirs(pip_packages):
        if not os.path.isfile(os.path.join(include_dir, header)):
            continue
        lib_dir, library = _find_library(lib_dirs, stem)
        if lib_dir:
            return {"include_dir": include_dir, "library_dir": lib_dir, "library": library}
    return None


def _cudnn_version(include_dir):
    for name in ("cudnn_version.h", "cudnn.h"):
        try:
            with open(os.path.join(include_dir, name), encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        parts = [re.search(r"#define\s+CUDNN_%s\s+(\d+)" % k, text) for k in ("MAJOR", "MINOR", "PATCHLEVEL")]
        if all(parts):
            return ".".join(m.group(1) for m in parts)
    return None


def probe_cudnn():
    found = _find("cudnn.h", "cudnn", ["cudnn"])
    if found:
        found["version"] = _cudnn_version(found["include_dir"])
    return found


def probe_cublas():
    # torch's cu12 wheels ship nvidia/cublas; the cu13 ones merge the toolkit into nvidia/cu13.
    return _find("cublas_v2.h", "cublas", ["cublas", "cu[0-9]*"])


def probe_gpus():
    import torch

    if not torch.cuda.is_available():
        return []
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append({
            "index": index,
            "name": props.name,
            "capability": "%d.%d" % (props.major, props.minor),
            "memory_bytes": int(props.total_memory),
        })
    return gpus


def probe_driver():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=15)
    lines = out.stdout.split()
    return lines[0] if out.returncode == 0 and lines else None


def _guard(errors, section, fn):
    try:
        return fn()
    except BaseException as e:  # noqa: BLE001 - a missing piece must never abort the probe
        if isinstance(e, KeyboardInterrupt):
            raise
        errors[section] = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
        return None


def probe():
    """The probe result as a dict (see the module docstring)."""
    errors = {}
    result = {
        "python": _guard(errors, "python", probe_python),
        "torch": _guard(errors, "torch", lambda: probe_torch(errors)),
        "cudnn": _guard(errors, "cudnn", probe_cudnn),
        "cublas": _guard(errors, "cublas", probe_cublas),
        "gpus": _guard(errors, "gpus", probe_gpus),
        "driver": _guard(errors, "driver", probe_driver),
    }
    if result["gpus"] is None:
        result["gpus"] = []
    result["errors"] = errors
    return result


def main():
    with quiet_stdout():
        result = probe()
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
