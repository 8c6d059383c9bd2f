"""The GPU's lock held for a process anvil runs that is not an evaluation (ncu_profile's Nsight
Compute run beside `anvil serve --overlap`'s waves):

    python -m anvil.gpu_hold LOCK SECONDS

takes the lock at LOCK as an evaluation prepared alone does (anvil.timing.GpuLock: the gate first,
then exclusive once no measurement is parked), within SECONDS; says "held" on stdout and keeps it
until its stdin ends (the caller's run is over, or the caller is gone); says "busy" and exits 3 when
the lock was not free in time. Standard library only."""
import signal
import sys

from anvil import timing


class _Late(Exception):
    pass


def main(argv):
    if len(argv) != 2:
        print("usage: python -m anvil.gpu_hold LOCK SECONDS", file=sys.stderr)
        return 2
    path, seconds = argv[0], max(1, int(float(argv[1])))

    def late(_sig, _frame):
        raise _Late()

    signal.signal(signal.SIGALRM, late)
    signal.alarm(seconds)
    try:
        lock = timing.GpuLock(path)
        signal.alarm(0)
    except _Late:
        print("busy", flush=True)
        return 3
    print("held", flush=True)
    sys.stdin.read()  # until the caller closes it (or ends)
    del lock  # held to this process's end
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
