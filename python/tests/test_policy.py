"""Proof of work from a profiled run (policy.analyze_trace): which kernels count as whose."""
from anvil import policy

OWN = {"my_add_kernel"}
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
        "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
TORCH_ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
             "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)")
POLICY = {"allowed_ops": [], "libraries": True}


def kernel(name, us, stream=7):
    return {"name": name, "us": us, "stream": stream}


def test_a_fill_from_a_creation_op_is_not_foreign_work():
    # KernelBench's `add` example: torch::zeros_like in the binding, then its own kernel (issue 17).
    a = policy.analyze_trace([kernel(FILL, 1.5), kernel("void my_add_kernel(float*, float*, float*, int)", 2.0)],
                             [], OWN, POLICY, marker_stream=7)
    assert a["own_share"] == 1.0
    assert a["fill_us"] == 1.5 and a["total_us"] == 3.5  # the time still has it
    assert [k["kind"] for k in a["kernels"]] == ["own", "fill"]
    memset = policy.analyze_trace([kernel("Memset (Device)", 1.0), kernel("my_add_kernel", 1.0)], [], OWN, POLICY)
    assert memset["own_share"] == 1.0


def test_torch_compute_is_foreign_work():
    a = policy.analyze_trace([kernel(TORCH_ADD, 3.0), kernel("my_add_kernel", 1.0), kernel(FILL, 5.0)],
                             [], OWN, POLICY)
    assert a["own_share"] == 0.25
    assert a["torch_us"] == 3.0


def test_fills_alone_are_no_work_of_its_own():
    a = policy.analyze_trace([kernel(FILL, 2.0)], [], OWN, POLICY)
    assert a["own_share"] is None and a["own_us"] == 0.0


def test_a_kernel_on_another_stream_is_named_a_fill_or_copy_is_not():
    a = policy.analyze_trace([kernel("my_add_kernel", 1.0, stream=9), kernel(FILL, 1.0, stream=9),
                              kernel("Memcpy DtoD (Device -> Device)", 1.0, stream=9)], [], OWN, POLICY,
                             marker_stream=7)
    assert list(a["side_stream_kernels"]) == ["my_add_kernel"]


def test_cublas_counts_as_its_own_only_where_libraries_are_allowed():
    gemm = kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", 4.0)
    assert policy.analyze_trace([gemm], [], OWN, POLICY)["own_share"] == 1.0
    assert policy.analyze_trace([gemm], [], OWN, dict(POLICY, libraries=False))["own_share"] == 0.0
