"""anvil's thin Python layer: the pieces of anvil that must run inside the torch interpreter.

Modules (each CLI prints exactly one JSON object on stdout):
  anvil.probe_env    python -m anvil.probe_env            Python/torch/cuDNN/cuBLAS/GPU facts
  anvil.task_probe   python -m anvil.task_probe FILE      import a KernelBench task, describe it
  anvil.dataset      python -m anvil.dataset FILE ROW     one row of a JSONL/Parquet dataset
  anvil.ahead        python -m anvil.ahead --out DIR FILE a single file's load_inline builds, read not run
  anvil.load_inline  load_inline(...), install()          torch load_inline routed through anvil

Nothing heavy (torch, pyarrow) is imported here; each module imports what it needs.
"""
