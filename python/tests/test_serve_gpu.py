"""`anvil serve --overlap` on a GPU (ANVIL_TEST_DEVICE=cuda; skipped elsewhere): a session's
ncu_profile takes the GPU's lock alone (anvil.gpu_hold, launched by the C++ tool), as the kernel's
/proc/locks shows it, while evaluations of the same GPU wait in their waves, and every one of them
is answered."""
import asyncio
import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from anvil.client import Client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANVIL = os.environ.get("ANVIL_BIN") or os.path.join(ROOT, "build", "anvil")

pytestmark = [pytest.mark.skipif(os.environ.get("ANVIL_TEST_DEVICE") != "cuda", reason="needs ANVIL_TEST_DEVICE=cuda"),
              pytest.mark.skipif(not os.access(ANVIL, os.X_OK), reason="%s is not built" % ANVIL)]


class LockHolders(threading.Thread):
    """Every 20 ms, the processes holding `path` (a flock) and how: {(pid, "WRITE"|"READ")}, with
    each holder's command line as first seen."""

    def __init__(self, path):
        super().__init__(daemon=True)
        self.path, self.stop, self.seen, self.cmdlines = path, threading.Event(), [], {}

    def run(self):
        while not self.stop.is_set():
            try:
                st = os.stat(self.path)
            except OSError:
                time.sleep(0.02)
                continue
            ident = "%02x:%02x:%d" % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
            now = set()
            with open("/proc/locks") as f:
                for line in f:
                    p = line.split()
                    if len(p) >= 6 and p[1] == "FLOCK" and p[5] == ident:
                        pid = int(p[4])
                        now.add((pid, p[3]))
                        if pid not in self.cmdlines:
                            try:
                                with open("/proc/%d/cmdline" % pid, "rb") as c:
                                    self.cmdlines[pid] = c.read().replace(b"\0", b" ").decode(errors="replace")
                            except OSError:
                                self.cmdlines[pid] = ""
            self.seen.append((time.time(), now))
            time.sleep(0.02)


@pytest.fixture(scope="module")
def gpu_server(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    state = tmp_path_factory.mktemp("serve")
    env = dict(os.environ, ANVIL_CACHE=str(cache))
    proc = subprocess.Popen([ANVIL, "serve", "--port", "0", "--device", "cuda", "--overlap", "4", "--state", str(state)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
    line = proc.stdout.readline()
    m = re.match(r"anvil serve: (http://127\.0\.0\.1:\d+) ", line)
    assert m, "no address in %r; stderr: %s" % (line, proc.stderr.read() if proc.poll() is not None else "")
    yield m.group(1), str(cache)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=120) == 0


def test_ncu_profile_in_a_session_holds_the_gpu_lock_alone_beside_queued_evaluations(gpu_server):
    url, cache = gpu_server
    pair = "02_softmax"
    task = os.path.join(ROOT, "examples", "tasks", pair + ".py")
    cand = os.path.join(ROOT, "examples", "candidates", pair, "cuda")
    files = {os.path.relpath(os.path.join(d, f), cand): open(os.path.join(d, f)).read()
             for d, _, fs in os.walk(cand) for f in fs}
    holders = LockHolders(os.path.join(cache, "locks", "gpu0.lock"))
    holders.start()

    async def go():
        async with Client(url, tool_timeout=900) as c:
            s = await c.create_session({"path": task}, {"seed": 3})
            calls = [{"name": "write_file", "arguments": json.dumps({"path": p, "content": t})} for p, t in files.items()]
            done = await c.call_tools(s["id"], calls + [{"name": "compile", "arguments": {}}])
            assert not any(r["error"] for r in done), done
            evals = [asyncio.ensure_future(c.evaluate({"path": task}, {"path": cand}, {"seed": i}, limit=900))
                     for i in range(6)]
            await asyncio.sleep(3)  # the first wave under way
            t0 = time.time()
            ncu = await c.call_tools(s["id"], [{"name": "ncu_profile", "arguments": {}}])
            t1 = time.time()
            results = await asyncio.gather(*evals)
            await c.end_session(s["id"])
            return ncu[0], (t0, t1), results

    ncu, (t0, t1), results = asyncio.run(go())
    holders.stop.set()
    holders.join()
    assert [r["outcome"] for r in results] == ["ok"] * 6, [r.get("message") for r in results]
    text = ncu.get("content") or ""
    counters_denied = "ERR_NVGPUCTRPERM" in text
    print("ncu_profile (%.1f s, error %s): %s" % (t1 - t0, ncu["error"], text[:300].replace("\n", " | ")))
    assert not ncu["error"] or counters_denied, text  # profiled, or the host keeps the counters (said so)
    if not counters_denied:
        assert re.search(r"kernel|Kernel", text), text
    hold = [pid for pid, cmd in holders.cmdlines.items() if "gpu_hold" in cmd]
    assert hold, "anvil.gpu_hold never held the lock: %s" % holders.cmdlines
    during = [(t, now) for t, now in holders.seen if any(pid in hold for pid, _ in now)]
    assert during and all(now == {(hold[0], "WRITE")} for _, now in during), during[:5]
    assert t0 <= during[0][0] and during[-1][0] <= t1 + 0.5
    evaluations = [pid for pid, cmd in holders.cmdlines.items() if pid not in hold]
    assert evaluations, "no evaluation seen holding the lock"  # they did take it, before and after
