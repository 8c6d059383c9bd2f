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


def test_a_kernel_named_like_torchs_does_not_make_torchs_kernels_its_own():
    """A module holding kernels it names vectorized_elementwise_kernel (ATen's elementwise kernels'
    base name), at::native::... or triton_poi_fused_add_0 (inductor's) while torch's kernels do the
    work (called past the dispatcher's profiling, at::_ops::X::redispatch: no op recorded): torch's
    kernels stay torch's. Before, a base-name match made them its own: 100% own work under cuda-agent."""
    decoys = {"vectorized_elementwise_kernel", "vectorized_elementwise_kernel(float*)",
              "at::native::vectorized_elementwise_kernel", "triton_poi_fused_add_0"}
    inductor = "triton_poi_fused_add_0"
    a = policy.analyze_trace([kernel(TORCH_ADD, 3.0), kernel(inductor, 2.0), kernel("my_add_kernel", 1.0)], [],
                             decoys | OWN, POLICY)
    assert a["own_us"] == 1.0 and a["torch_us"] == 5.0, a
    # The candidate's own kernels keep their credit, whatever their names hold of torch's marks
    # elsewhere: a namespace "flat::", a name with "triton_" in it, template arguments of c10's.
    own = {"flat::scale_kernel", "scale_kernel", "my_triton_style_kernel", "my_kernel"}
    b = policy.analyze_trace([kernel("void flat::scale_kernel(float*)", 1.0), kernel("my_triton_style_kernel", 1.0),
                              kernel("void my_kernel<c10::Half>(c10::Half*, at::Half const*)", 1.0)], [], own, POLICY)
    assert b["own_share"] == 1.0, b


def test_names_in_an_anonymous_namespace_have_their_own_base_name():
    """"void (anonymous namespace)::k<128>(float*)": base name k, not "void" (which every kernel of
    an anonymous namespace shared, so one such kernel of the candidate's made them all its own)."""
    assert policy.base_name("void (anonymous namespace)::k<128>(float*)") == "k"
    assert policy.qualified_name("void at::native::(anonymous namespace)::cat_kernel<4>(int)") == \
        "at::native::(anonymous namespace)::cat_kernel"
    from anvil import evidence  # noqa: F401 - kernel_names adds base names the same way
    own = {"(anonymous namespace)::k<128>(float*)", policy.base_name("void (anonymous namespace)::k<128>(float*)")}
    a = policy.analyze_trace([kernel("void (anonymous namespace)::k<128>(float*)", 1.0),
                              kernel("void (anonymous namespace)::someone_elses(float*)", 1.0)], [], own, POLICY)
    assert a["own_us"] == 1.0, a
