"""Shared helpers of the benchmark scripts: the machine's fingerprint, timing, anvil calls."""
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANVIL = os.environ.get("ANVIL_BIN", os.path.join(ROOT, "build", "anvil"))
# anvil builds against the torch of the interpreter running the benchmark.
os.environ.setdefault("ANVIL_PYTHON", sys.executable)


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def in_fork(fn, *args):
    """fn(*args), a JSON-able dict, computed in a forked child and sent back through a pipe (the
    probes' way to measure a child of a parent that imported what anvil's zygote imports); a child
    that raises or dies gives {"error": ...}."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            row = fn(*args)
        except BaseException as e:  # noqa: BLE001
            row = {"error": repr(e)[:300]}
        os.write(w, json.dumps(row).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data) if data else {"error": "no report"}


def fingerprint():
    import torch

    fp = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "host_cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "anvil_rev": os.environ.get("ANVIL_REV", "unknown"),
    }
    smi = shutil.which("nvidia-smi")
    if smi:
        r = sh([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"])
        if r.returncode == 0 and r.stdout.strip():
            lines = r.stdout.strip().splitlines()
            name, driver = [s.strip() for s in lines[0].split(",")]
            fp["device"], fp["driver"], fp["gpu_count"] = name, driver, len(lines)
    r = sh(["nvcc", "--version"]) if shutil.which("nvcc") else None
    if r is not None and r.returncode == 0:
        fp["nvcc"] = [l for l in r.stdout.splitlines() if "release" in l][0].strip()
    return fp


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def anvil_build(path, *extra):
    """Runs `anvil build --json` and returns (wall seconds, report)."""
    t0 = time.perf_counter()
    r = sh([ANVIL, "build", "--json", *extra, path])
    wall = time.perf_counter() - t0
    try:
        rep = json.loads(r.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"anvil build {path} printed no JSON:\n{r.stdout}\n{r.stderr}")
    if not rep.get("ok"):
        raise RuntimeError(f"anvil build {path} failed: {rep.get('error')}\n{rep.get('diagnostics')}")
    return wall, rep


def fresh_copy(src, nonce, parent):
    """A copy of candidate `src` whose sources carry a nonce, so nothing of it is cached."""
    dst = tempfile.mkdtemp(prefix="cand-", dir=parent)
    shutil.copytree(os.path.join(src, "kernels"), os.path.join(dst, "kernels"))
    if os.path.exists(os.path.join(src, "model_new.py")):
        shutil.copy(os.path.join(src, "model_new.py"), dst)
    for name in os.listdir(os.path.join(dst, "kernels")):
        with open(os.path.join(dst, "kernels", name), "a") as f:
            f.write(f"\n// nonce {nonce}\n")
    return dst


def write_results(path, data, table, quiet=False):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".json", "w") as f:
        json.dump(data, f, indent=2)
    with open(path + ".md", "w") as f:
        f.write(table)
    if not quiet:
        print(table)
    sys.stdout.flush()
