"""The candidate's confinement (anvil.confine) on its own: two confined processes at once, as two
concurrent evaluations would have them."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import PYTHON_DIR

# Enters the confinement, then spawns `sleep 61.7` processes until `limit` or the first failure,
# prints "uid U made N (why)", and holds them for `hold` seconds (they die with it: PID namespace).
CONFINED = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, %r)
    from anvil import confine
    limit, hold = int(sys.argv[1]), float(sys.argv[2])
    confine.enter([], gpu=False)
    made, why = 0, "-"
    try:
        while made < limit:
            os.posix_spawn("/bin/sleep", ["sleep", "61.7"], {})
            made += 1
    except OSError as e:
        why = e.strerror
    print("uid %%d made %%d (%%s)" %% (os.getuid(), made, why), flush=True)
    time.sleep(hold)
""") % PYTHON_DIR


def confined(limit, hold):
    return subprocess.Popen([sys.executable, "-c", CONFINED, str(limit), str(hold)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_fork_bomb_is_capped_and_starves_no_other_evaluation():
    """One confined process spawns until the cap stops it (share/sandbox.json's processes) and holds
    its processes; a second, confined meanwhile, still starts 50: the cap counts each
    evaluation's processes alone (its own user namespace, or as root its own uid), not a budget
    shared with the bomb."""
    from anvil import confine

    cap = int(confine.settings()["processes"])
    bomb = confined(cap + 1000, 20)
    try:
        line = bomb.stdout.readline()
        if not line:
            pytest.skip("no confinement here: %s" % bomb.stderr.read()[-300:])
        uid_a, made_a = int(line.split()[1]), int(line.split()[3])
        assert cap - 64 <= made_a < cap, line  # the process's own threads count too
        assert "Resource temporarily unavailable" in line, line
        other = confined(50, 0)
        out, err = other.communicate(timeout=60)
        assert out.split()[3] == "50", out + err
        if os.geteuid() == 0:
            assert int(out.split()[1]) != uid_a, "two evaluations with one uid share one count: " + out + line
    finally:
        bomb.kill()
        bomb.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _sleepers():
        time.sleep(0.05)
    assert not _sleepers(), "the bomb's processes outlived it"


def _sleepers():
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if b"61.7" in f.read():
                    found.append(pid)
        except OSError:
            pass
    return found


def test_the_candidates_host_memory_holds_twice_the_tasks_weights():
    """ModelNew is built on the host first, as KernelBench's harness builds it: level 2's 59 holds a
    4 GiB Linear there, which the fixed candidate_host_bytes refused (load_error for the task's own
    Model, H100 2026-12-07). The allowance adds twice the task's weights to it."""
    from types import SimpleNamespace

    import torch

    from anvil import confine
    from anvil.candidate import CandidateServer

    base = int(confine.settings()["candidate_host_bytes"])
    server = SimpleNamespace(h=SimpleNamespace(device=torch.device("cuda", 0)), weights={})
    assert CandidateServer.host_allowance(server) == base
    server.weights = {"matmul.weight": torch.empty(4096, 1024), "matmul.bias": torch.empty(4096)}
    assert CandidateServer.host_allowance(server) == base + 2 * (4096 * 1024 + 4096) * 4


def test_tritons_cache_is_the_candidates_own_after_the_environment_is_cleaned(tmp_path):
    """Triton, imported before the candidate's process cleans its environment (the zygote imports
    torch.compile's machinery), took the caller's home for its JIT cache then: every Triton single
    file raised "Read-only file system: '/root'" in the jail (H100, 2026-12-07). After
    clean_environment its cache, dump and override folders are under the private /tmp."""
    pytest.importorskip("triton")
    code = ("import os, triton\n"
            "from anvil import confine\n"
            "confine.clean_environment()\n"
            "from triton import knobs\n"
            "print(knobs.cache.dir, knobs.cache.dump_dir, knobs.cache.override_dir)\n")
    env = dict(os.environ, HOME=str(tmp_path / "callers-home"), PYTHONPATH=PYTHON_DIR)
    env.pop("TRITON_HOME", None)
    env.pop("TRITON_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out == ["/tmp/.triton/cache", "/tmp/.triton/dump", "/tmp/.triton/override"], out
