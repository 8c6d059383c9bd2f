"""The judge's GPU clock across two processes arranged as anvil.judge arranges them, for
test_batch.py on a GPU: the done page shared by a fork made before either process touches CUDA,
the pool and the gate handed over through CUDA IPC, a batch of n calls of y = 2x + 1.

    python gpu_clock_pair.py honest|silent

"silent": the candidate's side never raises the done flag; the judge must end its clock with an
error, end that process and release its own stream. Prints one JSON object: the clock's figures,
whether every sampled output was right, and the error if any.
"""
import json
import os
import signal
import socket
import sys
import time

from anvil import batch

N, NUMEL = 64, 1 << 20


def send(sock, obj):
    sock.sendall((json.dumps(obj) + "\n").encode())


def recv(f):
    line = f.readline()
    if not line:
        raise EOFError("the other side went away")
    return json.loads(line)


def candidate(sock, page, mode):
    import faulthandler

    import torch

    faulthandler.dump_traceback_later(40, exit=True)  # a hang shows where it is

    torch.cuda.init()
    done_ptr = page.register()
    f = sock.makefile("r")
    msg = recv(f)
    mapped = batch.Mapped()
    pool = batch.device_view(mapped.base(msg["pool"])[0], msg["nbytes"])
    words = mapped.base(msg["gate"])[0]
    xs = [pool[k * NUMEL * 4:(k + 1) * NUMEL * 4].view(torch.float32) for k in range(N)]
    # The outputs' memory and the kernels first, as the candidate's process has them from its earlier
    # calls: a cudaMalloc, or a kernel's first launch (CUDA loads modules lazily), behind the stream's
    # wait would wait for the gate (which the judge opens at a deadline; here it never would).
    outs = [torch.empty_like(x) for x in xs]
    torch.mul(xs[0], 2, out=outs[0]).add_(1)
    torch.cuda.synchronize()
    batch.wait_for_gate(words, msg["value"])
    for x, o in zip(xs, outs):
        torch.mul(x, 2, out=o).add_(1)
    if mode == "honest":
        batch.raise_done(done_ptr, msg["value"])
    exporter = batch.Exporter()
    dense = {"segs": [], "offs": []}
    for o in outs:
        exporter.note(o, dense)
    send(sock, {"dense": dense, "segments": exporter.segments})
    torch.cuda.synchronize()
    send(sock, {"type": "batch_done"})
    time.sleep(60)  # the judge ends this process


def judge(sock, page, pid):
    import faulthandler

    import torch

    faulthandler.dump_traceback_later(45, exit=True)

    device = torch.device("cuda")
    f = sock.makefile("r")
    flags = batch.FlagWords(page)
    room = batch.Room(device).ensure(N * NUMEL * 4)
    inputs = torch.randn(N, NUMEL, device=device)
    room.staging[:N * NUMEL * 4].copy_(inputs.view(-1).view(torch.uint8))
    room.pool.view.fill_(0xFF)
    torch.cuda.synchronize()
    clock, gate = flags.next()
    send(sock, {"pool": room.handle, "nbytes": room.pool.nbytes, "gate": gate["handle"], "value": gate["value"]})
    queued = recv(f)
    outputs = batch.DenseOutputs(queued["dense"], queued["segments"], N)
    positions = torch.randint(0, NUMEL, (N, batch.SAMPLES), device=device)
    reads = batch.reads_dense(outputs, [(NUMEL, positions)], batch.Mapped()).ready()
    torch.cuda.current_stream().synchronize()
    clock.open([(room.pool.view[:N * NUMEL * 4], room.staging[:N * NUMEL * 4])])
    clock.close(reads)
    recv(f)
    report = {}
    try:
        clock.finish(limit_s=0.5)
    except batch.BatchError as e:
        report["error"] = str(e)
        os.kill(pid, signal.SIGKILL)
        started = time.perf_counter()
        clock.release()
        report["release_s"] = time.perf_counter() - started
    torch.cuda.synchronize()  # returns: no stream of the judge's is left waiting
    got = reads.samples()[("rows", 0, tuple(range(N)))]
    report.update(ms=clock.ms(), copy_ms=clock.copy_ms(), gate_ms=clock.gate_ms(),
                  right=bool(torch.equal(got, torch.gather(inputs * 2 + 1, 1, positions))))
    return report


def main():
    mode = sys.argv[1]
    page = batch.DonePage()
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        a.close()
        try:
            candidate(b, page, mode)
        finally:
            os._exit(0)
    b.close()
    try:
        report = judge(a, page, pid)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
    os._exit(0)  # as anvil's runner: no interpreter teardown (CUDA's, with a registered page and IPC maps)
