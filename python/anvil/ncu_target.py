"""The program Nsight Compute profiles for the agent's ncu_profile tool.

python -m anvil.ncu_target TASK_FILE WORKDIR [--reference]: imports the task's Model and the
workdir's ModelNew (with its built cuda_extension), copies Model's weights into it, makes one seeded
input set, runs two warm-up calls, then exactly one forward call between cudaProfilerStart and
cudaProfilerStop (ncu runs with --profile-from-start off, so only that call's kernels are
profiled). With --reference the call profiled is Model's (the workdir's model_new.py is not imported).
"""
import importlib.util
import os
import sys


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv):
    reference = "--reference" in argv
    argv = [a for a in argv if a != "--reference"]
    if len(argv) != 2:
        print("usage: python -m anvil.ncu_target TASK_FILE WORKDIR [--reference]", file=sys.stderr)
        return 2
    task_file, workdir = argv
    import torch

    task = _load(task_file, "anvil_ncu_task")
    torch.manual_seed(0)
    init = task.get_init_inputs()
    ref = task.Model(*init).cuda().eval()
    if reference:
        cand = ref
    else:
        sys.path.insert(0, os.path.abspath(workdir))
        cand_mod = _load(os.path.join(workdir, "model_new.py"), "anvil_ncu_model_new")
        torch.manual_seed(0)
        cand = cand_mod.ModelNew(*init).cuda().eval()
        cand.load_state_dict(ref.state_dict(), strict=False)
    torch.manual_seed(1)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    with torch.no_grad():
        for _ in range(2):
            cand(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        cand(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
