import math

import pytest
import torch

from anvil import output_compare

STRICT = {"preset": "strict",
          "float32": {"atol": 1e-4, "rtol": 1e-4, "norm": 1e-5},
          "float16": {"atol": 1e-2, "rtol": 1e-2, "norm": 1e-3},
          "bfloat16": {"atol": 1e-2, "rtol": 1e-2, "norm": 1e-2},
          "float64": {"atol": 1e-7, "rtol": 1e-7, "norm": 1e-9}}


def test_mismatch_report_format():
    expected = torch.ones(2, 3)
    got = expected.clone()
    got[0, 1] = 1.5
    got[1, 2] = 0.5
    assert output_compare.compare((got,), (expected,), STRICT) == [
        "output 0: 2 of 6 elements differ; first at index (0, 1): got 1.5, expected 1; "
        "max abs error 0.5 at (0, 1); max rel error 0.5; tolerance atol=1e-4 rtol=1e-4 (preset strict)"]


def test_report_of_single_tensor_and_max_error_location():
    expected = torch.tensor([[0.6001, 2.0], [4.0, 1.0]])
    got = expected.clone()
    got[0, 0] = 0.5123
    got[1, 0] = 5.0
    lines = output_compare.compare(got, expected, STRICT)
    assert lines == ["output: 2 of 4 elements differ; first at index (0, 0): got 0.5123, expected 0.6001; "
                     "max abs error 1 at (1, 0); max rel error 0.25; tolerance atol=1e-4 rtol=1e-4 "
                     "(preset strict)"]


def test_match_and_tolerance_boundary():
    expected = torch.tensor([1.0, -2.0, 0.0], dtype=torch.float64)
    tol = {"float64": {"atol": 0.5, "rtol": 0.25, "norm": None}}
    # allowed |d| = 0.5 + 0.25*|ref| = 0.75, 1.0, 0.5
    assert output_compare.compare(expected + torch.tensor([0.75, -1.0, 0.5], dtype=torch.float64), expected, tol) == []
    lines = output_compare.compare(expected + torch.tensor([0.75, -1.001, 0.5], dtype=torch.float64), expected, tol)
    assert len(lines) == 1 and lines[0].startswith("output: 1 of 3 elements differ; first at index (1,)")
    assert lines[0].endswith("tolerance atol=0.5 rtol=0.25")  # no preset named


def test_norm_rule():
    expected = torch.ones(100)
    got = expected + 1e-3  # elementwise fine under atol 1e-2, relative norm 1e-3 > 1e-4
    tol = {"preset": "p", "float32": {"atol": 1e-2, "rtol": 0, "norm": 1e-4}}
    lines = output_compare.compare(got, expected, tol)
    assert len(lines) == 1
    assert lines[0].startswith("output: relative error norm 0.001 exceeds norm=1e-4; max abs error 0.001 at (0,);")
    assert lines[0].endswith("tolerance atol=0.01 rtol=0 norm=1e-4 (preset p)")
    assert output_compare.compare(got, expected, {"float32": {"atol": 1e-2, "rtol": 0, "norm": 1e-2}}) == []
    assert output_compare.compare(got, expected, {"float32": {"atol": 1e-2, "rtol": 0}}) == []  # no norm: skipped


def test_norm_skipped_for_zero_reference():
    expected = torch.zeros(10)
    got = torch.full((10,), 1e-5)
    assert output_compare.compare(got, expected, {"float32": {"atol": 1e-4, "rtol": 0, "norm": 1e-9}}) == []
    lines = output_compare.compare(torch.full((10,), 1.0), expected, STRICT)
    assert "max rel error n/a" in lines[0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nonfinite_never_passes(bad):
    expected = torch.ones(4)
    got = expected.clone()
    got[2] = bad
    lines = output_compare.compare(got, expected, {"float32": {"atol": 1e30, "rtol": 1e30, "norm": None}})
    assert len(lines) == 1
    assert lines[0].startswith("output: 1 of 4 elements differ; first at index (2,): got %s, expected 1; "
                               "max abs error inf at (2,)" % output_compare.fmt_num(bad))
    assert ("1 NaN and 0 Inf" if math.isnan(bad) else "0 NaN and 1 Inf") in lines[0]


def test_integers_compare_exactly():
    expected = torch.tensor([1, 2, 3])
    assert output_compare.compare(expected.clone(), expected, STRICT) == []
    lines = output_compare.compare(torch.tensor([1, 2, 4]), expected, STRICT)
    assert lines == ["output: 1 of 3 elements differ; first at index (2,): got 4, expected 3; max abs error 1 "
                     "at (2,); max rel error 0.3333; tolerance exact (int64) (preset strict)"]
    big = torch.tensor([2 ** 60], dtype=torch.int64)
    assert output_compare.compare(big + 1, big, STRICT) != []  # exact in int64, not through float64


def test_dtype_without_entry_is_exact_and_entries_follow_reference_dtype():
    expected = torch.ones(3, dtype=torch.float16)
    tol = {"float32": {"atol": 1, "rtol": 1, "norm": None}}
    assert "tolerance exact (float16)" in output_compare.compare(expected + 0.001, expected, tol)[0]
    bf = torch.ones(3, dtype=torch.bfloat16)
    assert output_compare.compare(bf * 1.0078125, bf, STRICT) == []  # 7.8e-3 < 1e-2 + 1e-2
    assert output_compare.compare(torch.tensor([True, False]), torch.tensor([True, True]), STRICT)[0].startswith(
        "output: 1 of 2 elements differ; first at index (1,): got False, expected True")


def test_structure_mismatches():
    t = torch.ones(2)
    assert output_compare.compare((t,), t, STRICT) == ["output: got a tuple of 1 items, expected a tensor"]
    assert output_compare.compare(t, (t, t), STRICT) == ["output: got a tensor, expected a tuple of 2 items"]
    assert output_compare.compare((t,), (t, t), STRICT) == ["output: got a tuple of 1 items, expected a tuple of 2 items"]
    assert output_compare.compare([t, t], (t, t), STRICT) == []  # list and tuple are both sequences
    assert output_compare.compare({"a": t}, {"b": t}, STRICT) == [
        "output: dict keys differ: missing keys 'b'; unexpected keys 'a'"]
    assert output_compare.compare({"a": t + 1}, {"a": t}, STRICT)[0].startswith("output 'a': 2 of 2 elements differ")
    assert output_compare.compare((t, (t, t + 1)), (t, (t, t)), STRICT)[0].startswith("output 1.1: 2 of 2")
    assert output_compare.compare(3, 3, STRICT) == []
    assert output_compare.compare(3.0, 3, STRICT) == ["output: got float 3.0, expected int 3"]
    assert output_compare.compare(float("nan"), float("nan"), STRICT) == ["output: got float nan, expected float nan"]
    assert output_compare.compare(None, t, STRICT) == ["output: got None, expected a tensor"]


def test_shape_dtype_and_subclass():
    t = torch.ones(2, 3)
    assert output_compare.compare(torch.ones(3, 2), t, STRICT) == ["output: shape [3, 2], expected [2, 3]"]
    assert output_compare.compare(t.double(), t, STRICT) == ["output: dtype float64, expected float32"]

    class Lazy(torch.Tensor):
        pass

    assert output_compare.compare(t.as_subclass(Lazy), t, STRICT) == [
        "output: got a tensor subclass Lazy, expected a tensor"]
    assert output_compare.compare(torch.nn.Parameter(t.clone()), t, STRICT) == []


def test_report_is_limited_to_a_few_lines():
    t = torch.ones(2)
    lines = output_compare.compare(tuple(t + 1 for _ in range(5)), tuple(t for _ in range(5)), STRICT)
    assert len(lines) == 4 and lines[-1] == "... and 2 more outputs differ"


def test_chunked_statistics_match(monkeypatch):
    torch.manual_seed(0)
    expected = torch.randn(7, 9)
    got = expected.clone()
    got[3, 4] += 1.0
    got[5, 8] -= 3.0
    got[6, 0] = float("nan")
    whole = output_compare.compare(got, expected, STRICT)
    monkeypatch.setattr(output_compare, "CHUNK", 5)
    assert output_compare.compare(got, expected, STRICT) == whole
    assert whole[0].startswith("output: 3 of 63 elements differ; first at index (3, 4): ")
    assert "max abs error inf at (6, 0)" in whole[0]


def test_empty_and_zero_dim():
    assert output_compare.compare(torch.ones(0, 3), torch.ones(0, 3), STRICT) == []
    lines = output_compare.compare(torch.tensor(2.0), torch.tensor(1.0), STRICT)
    assert lines[0].startswith("output: 1 of 1 elements differ; first at index (): got 2, expected 1")


def test_formatting():
    assert output_compare.fmt_tol(1e-4) == "1e-4"
    assert output_compare.fmt_tol(5e-3) == "5e-3"
    assert output_compare.fmt_tol(1.5e-7) == "1.5e-7"
    assert output_compare.fmt_tol(0.01) == "0.01"
    assert output_compare.fmt_tol(0) == "0"
    assert output_compare.fmt_num(0.08776) == "0.08776"
    assert output_compare.fmt_num(3.2e-05) == "3.2e-5"
    assert output_compare.fmt_num(123456.0) == "1.235e+5"
    assert output_compare.fmt_num(float("nan")) == "nan"
    assert output_compare.fmt_num(7) == "7"
    assert output_compare.fmt_index((3, 17)) == "(3, 17)"
    assert output_compare.fmt_index((5,)) == "(5,)"


def test_nonfinite():
    assert output_compare.nonfinite(torch.ones(3)) is None
    assert output_compare.nonfinite((torch.ones(2), [torch.tensor([1.0, float("inf")])])) == "Inf"
    assert output_compare.nonfinite({"a": torch.tensor([float("inf"), float("nan")])}) == "NaN"
    assert output_compare.nonfinite(float("nan")) == "NaN"
    assert output_compare.nonfinite(torch.tensor([1, 2])) is None


def test_changed_elements_is_bitwise():
    a = torch.tensor([1.0, float("nan"), 0.0, 4.0])
    assert output_compare.changed_elements(a, a.clone()) == 0  # NaN equals itself bitwise
    b = a.clone()
    b.view(torch.int32)[1] += 1  # another NaN payload
    assert math.isnan(b[1].item())
    assert output_compare.changed_elements(a, b) == 1
    c = a.clone()
    c[2] = -0.0  # == 0.0, but not the same bits
    assert output_compare.changed_elements(a, c) == 1
    assert output_compare.changed_elements(a, torch.zeros(4)) == 3
    assert output_compare.changed_elements(a, a.reshape(2, 2)) == 4  # a changed shape counts as all
    assert output_compare.changed_elements(a, a.double()) == 4
    t = torch.randn(4, 5).t()  # non-contiguous
    assert output_compare.changed_elements(t, t.clone()) == 0
    assert output_compare.changed_elements(torch.tensor([True, False]), torch.tensor([True, True])) == 1


def test_changed_elements_counts_across_chunks(monkeypatch):
    monkeypatch.setattr(output_compare, "CHANGED_CHUNK", 3)
    a = torch.arange(10, dtype=torch.float32)
    b = a.clone()
    b[[0, 4, 9]] = -1
    assert output_compare.changed_elements(a, b) == 3
    h = torch.arange(6, dtype=torch.float16).reshape(2, 3)
    assert output_compare.changed_elements(h, h.clone()) == 0


@pytest.mark.parametrize("how", ["host", "gpu_rule"])
def test_a_digest_sees_any_one_changed_word_and_only_a_change(monkeypatch, how):
    """A lean evaluation's input check and the stress trials' draws (docs/runner-protocol.md): the
    same contents hash alike, in rows and chunks too; one changed element, or one changed trailing
    byte, changes the hash. Both rules: the host's (SHA-256) and a GPU's (weighted_digest), the
    latter run here on the host with rows of 3 words and chunks of 2 rows."""
    monkeypatch.setattr(output_compare, "DIGEST_CHUNK", 6)
    monkeypatch.setattr(output_compare, "DIGEST_ROW", 3)
    monkeypatch.setattr(output_compare, "_DIGEST_WEIGHTS", {})

    def digest(t):
        if how == "host":
            return output_compare.digest(t)
        return output_compare.weighted_digest(t.detach().contiguous().reshape(-1).view(torch.uint8))

    x = torch.rand(37)
    d = digest(x)
    assert digest(x.clone()) == d
    for i in (0, 5, 36):
        y = x.clone()
        y[i] = -y[i] - 1
        assert digest(y) != d, i
    for i in (2, 36):  # one bit: the sign's (a word's change by 2^31, whose product wraps modulo 2^32)
        y = x.clone()
        y[i] = -y[i]
        assert digest(y) != d, i
    words = torch.tensor([0x7FFFFFFF, -(1 << 31), 12345, -1], dtype=torch.int32)  # products that overflow int32
    for i in range(4):
        y = words.clone()
        y[i] ^= 1 << 30
        assert digest(y) != digest(words), i
    swapped = x.clone()  # equal rows in another order: the rows' multipliers tell them apart
    swapped[:3], swapped[3:6] = x[3:6], x[:3]
    assert digest(swapped) != d
    bytes_ = torch.arange(7, dtype=torch.uint8)  # 7 bytes: one word and a 3-byte tail
    changed = bytes_.clone()
    changed[6] = 200
    assert digest(bytes_) == digest(bytes_.clone()) != digest(changed)
    # Views whose bytes start off a 4-byte boundary (an input a task passes as x[1:]) hash as their copies.
    for view in (torch.rand(41, dtype=torch.float16)[1:], (torch.rand(23) > 0.5)[3:], torch.arange(30, dtype=torch.uint8)[1:]):
        assert view.data_ptr() % 4
        assert digest(view) == digest(view.clone())
    assert digest(torch.empty(0)) == digest(torch.empty(0))


def test_the_fast_path_decides_as_the_exact_rule(monkeypatch):
    """output_compare's fast path (the outputs' own precision, with a margin) only ever says "passes"
    where the exact float64 rule does: on errors drawn around every boundary (elementwise and norm),
    NaN and Inf, half types, the decision is the same with and without it."""
    g = torch.Generator().manual_seed(5)
    cases = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        tol = {"atol": 1e-3, "rtol": 1e-3, "norm": 1e-3}
        expected = torch.randn(4096, generator=g).to(dtype)
        for scale in (0.0, 1e-5, 1e-4, 5e-4, 9.9e-4, 1e-3, 1.01e-3, 2e-3, 1e-2):
            got = (expected.double() + scale * (1 + expected.double().abs()) * torch.rand(4096, generator=g,
                                                                                      dtype=torch.float64)).to(dtype)
            cases.append((got, expected, {output_compare.dtype_name(dtype): tol}))
        for special in (float("nan"), float("inf")):
            got = expected.clone()
            got[7] = special
            cases.append((got, expected, {output_compare.dtype_name(dtype): tol}))
    for got, expected, tol in cases:
        fast = output_compare.compare(got, expected, tol)
        monkeypatch.setattr(output_compare, "_clearly_within", lambda *a: False)
        exact = output_compare.compare(got, expected, tol)
        monkeypatch.undo()
        assert (fast == []) == (exact == []), (got.dtype, fast, exact)
        assert fast == exact
