"""DenseNet201's torch.compile cold with compile_threads N, then again with 1 on the same cache (a hit?)."""
import importlib.util, os, sys, time
path, threads, cache = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
os.environ["TRITON_CACHE_DIR"] = cache + "/triton"
import torch, torch._inductor.config as ic
spec = importlib.util.spec_from_file_location("task", path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
torch.manual_seed(0)
model = m.Model(*m.get_init_inputs()).cuda().eval()
args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in m.get_inputs()]
torch._dynamo.reset(); ic.compile_threads = threads
fn = torch.compile(model)
t = time.perf_counter()
with torch.no_grad():
    fn(*args)
torch.cuda.synchronize()
print("threads %d: first call %.1f s" % (threads, time.perf_counter() - t), flush=True)
