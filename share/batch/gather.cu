// gather.cu: the judge's read of a batch's outputs (python/anvil/batch.py): byte i of the result is
// byte i % size of the element at addr[i / size]. The addresses lie in allocations of another
// process mapped through CUDA IPC, so no tensor spans them: one launch reads the samples of every
// output of every call. gather.ptx is generated from this file (compute_75, any later GPU JITs it):
//   nvcc -ptx -arch=compute_75 -o gather.ptx gather.cu
extern "C" __global__ void anvil_gather(const unsigned long long* addr, unsigned char* out, long long n, int size) {
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n * size) out[i] = reinterpret_cast<const unsigned char*>(addr[i / size])[i % size];
}
