"""`anvil serve --ray`: the queue judged by workers on a real Ray cluster (docs/service.md).

The cluster is Ray's own, two nodes on this machine (ray.cluster_utils.Cluster: a head and a
second raylet, each a real node with its own worker processes); each worker actor runs a
node-local `anvil serve` judging CPU variants. What is checked: every evaluation answered once,
with its worker named and both workers used; a session's verify and final evaluation judged by a
worker; a worker whose server is killed under an evaluation
has it run again (its attempt counted); a server killed with -9 leaves no worker behind; an address
with no cluster is one clear line.
"""
import asyncio
import json
import os
import re
import signal
import subprocess
import time

import jsonschema
import pytest

from anvil.client import Client
from anvil.ray_pool import worker_servers

ray_cluster_utils = pytest.importorskip("ray.cluster_utils")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANVIL = os.environ.get("ANVIL_BIN") or os.path.join(ROOT, "build", "anvil")
KB = os.path.join(ROOT, "examples", "kernelbench", "cpu")
FAST = ["--compile-mode", "none", "--calls", "5", "--warmup", "1", "--trials", "2"]

pytestmark = pytest.mark.skipif(not os.access(ANVIL, os.X_OK), reason="%s is not built" % ANVIL)


def start_server(address, state, *extra):
    proc = subprocess.Popen([ANVIL, "serve", "--ray", address, "--device", "cpu", "--port", "0", "--state", str(state)]
                            + FAST + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    line = proc.stdout.readline()
    m = re.match(r"anvil serve: (http://127\.0\.0\.1:\d+) ", line)
    assert m, "no address in %r; stderr: %s" % (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, m.group(1)


@pytest.fixture(scope="module")
def cluster():
    c = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    yield c
    c.shutdown()


@pytest.fixture(scope="module")
def server(cluster, tmp_path_factory):
    proc, url = start_server(cluster.address, tmp_path_factory.mktemp("serve-ray"), "--ray-workers", "2")
    yield url, proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


def test_the_queue_is_judged_by_both_workers_each_once(server, small_task):
    url, _ = server

    async def go():
        async with Client(url) as c:
            health = await c.health()
            ok = {"path": os.path.join(ROOT, "examples", "candidates", "01_elementwise_chain", "cpu")}
            wrong = {"path": os.path.join(ROOT, "examples", "broken", "wrong_math", "cpu")}
            kb_task = {"source": open(os.path.join(KB, "add_model.py")).read(), "name": "add_model.py"}
            kb_file = {"source": open(os.path.join(KB, "add_model_new.py")).read()}
            jobs = [c.evaluate({"path": small_task}, ok, {"seed": 1}, limit=900),
                    c.evaluate({"path": small_task}, wrong, {"seed": 2}, limit=900),
                    c.evaluate(kb_task, kb_file, {"protocol": "kernelbench", "seed": 3}, limit=900),
                    c.evaluate({"path": small_task}, ok, {"seed": 4}, limit=900)]
            return health, await asyncio.gather(*jobs), await c.metrics()

    health, results, metrics = asyncio.run(go())
    assert health["status"] == "ok" and health["lanes"] == 2, health
    nodes = {w["node_id"] for w in health["ray"]["workers"]}
    assert len(nodes) == 2, health  # spread: a worker on each node
    outcomes = [r["outcome"] for r in results]
    assert outcomes == ["ok", "wrong_answer", "ok", "ok"], [(r["outcome"], r["message"][:300]) for r in results]
    schema = json.load(open(os.path.join(ROOT, "schemas", "anvil.serve-evaluation-1.schema.json")))
    for r in results:
        jsonschema.validate(r, schema)
        assert r["attempts"] == 1, r
        assert r["worker"]["node_id"] in nodes, r["worker"]
        assert r["evaluation"]["defenses"]["enabled"] is True
    assert results[2]["evaluation"]["protocol"]["name"] == "kernelbench"
    assert results[2]["evaluation"]["candidate"]["kind"] == "file"
    assert {r["worker"]["lane"] for r in results} == {0, 1}, [r["worker"] for r in results]
    assert re.search(r'anvil_evaluations_total\{outcome="ok"\} 3', metrics), metrics


def test_a_worker_killed_under_an_evaluation_has_it_run_again(server, small_task):
    url, _ = server
    ok = {"path": os.path.join(ROOT, "examples", "candidates", "01_elementwise_chain", "cpu")}

    async def go():
        async with Client(url) as c:
            workers = {w["lane"]: w for w in (await c.health())["ray"]["workers"]}
            sent = await c.submit({"path": small_task}, ok, {"seed": 7})
            deadline = time.monotonic() + 300
            lane = None
            while lane is None and time.monotonic() < deadline:  # the lane that took it
                busy = re.findall(r'anvil_lane_busy\{lane="ray(\d+)"\} 1', await c.metrics())
                lane = int(busy[0]) if busy else None
                await asyncio.sleep(0.05)
            assert lane is not None, "the evaluation never ran"
            os.kill(workers[lane]["serve_pid"], signal.SIGKILL)
            return await c.wait(sent, limit=900)

    r = asyncio.run(go())
    assert r["outcome"] == "ok" and r["attempts"] == 2, json.dumps(r)[:2000]


def test_a_sessions_verify_and_its_final_evaluation_are_judged_on_the_cluster(server, small_task):
    url, _ = server
    cand = os.path.join(ROOT, "examples", "candidates", "01_elementwise_chain", "cpu")
    files = {os.path.relpath(os.path.join(d, f), cand): open(os.path.join(d, f)).read()
             for d, _, fs in os.walk(cand) for f in fs}

    async def go():
        async with Client(url) as c:
            nodes = {w["node_id"] for w in (await c.health())["ray"]["workers"]}
            s = await c.create_session({"path": small_task}, {"seed": 5})
            calls = [{"name": "write_file", "arguments": json.dumps({"path": p, "content": t})} for p, t in files.items()]
            results = await c.call_tools(s["id"], calls + [{"name": "compile", "arguments": {}},
                                                           {"name": "verify", "arguments": {}}])
            final = await c.finalize(s["id"], limit=900)
            await c.end_session(s["id"])
            return nodes, results[-1], final

    nodes, verify, final = asyncio.run(go())
    assert not verify["error"] and verify["content"].startswith("CORRECT"), verify
    assert verify["detail"]["worker"]["node_id"] in nodes, verify["detail"]
    assert final["outcome"] == "ok" and final["worker"]["node_id"] in nodes, json.dumps(final)[:2000]


def test_a_server_killed_leaves_no_worker_behind(server):
    url, proc = server  # the last test of this server: it is killed
    assert asyncio.run(_health(url))["lanes"] == 2
    deadline = time.monotonic() + 120  # this module's: the restarted worker's too, once it is up
    while len(worker_servers()) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    mine = set(worker_servers())
    assert len(mine) == 2, mine
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60  # the bridge dies with its server, its actors with the bridge
    while set(worker_servers()) & mine and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(worker_servers()) & mine, "a worker's server outlived its server by 60 s"


async def _health(url):
    async with Client(url) as c:
        return await c.health()


@pytest.mark.parametrize("args,says", [
    (["--ray", "127.0.0.1:1"], "no Ray cluster answers at 127.0.0.1:1"),
    (["--ray-workers", "2"], "--ray-workers, --ray-python and --ray-anvil go with --ray ADDRESS"),
])
def test_bad_ray_options_are_one_clear_line(tmp_path, args, says):
    proc = subprocess.run([ANVIL, "serve", "--device", "cpu", "--port", "0", "--state", str(tmp_path)] + args,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc
    assert says in proc.stderr, proc.stderr


def test_more_workers_than_the_cluster_holds_is_said_at_once(cluster, tmp_path):
    started = time.monotonic()
    proc = subprocess.run([ANVIL, "serve", "--ray", cluster.address, "--ray-workers", "5", "--device", "cpu",
                           "--port", "0", "--state", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc
    assert "--ray-workers 5: the Ray cluster at %s offers 2 CPU(s)" % cluster.address in proc.stderr, proc.stderr
    assert time.monotonic() - started < 60
