"""anvil.stress: the stress trials' inputs and their gross-error rule, on the CPU (the rule's own
arithmetic; the judge's use of it is in test_judge.py and the hack suite)."""
import torch

from anvil import evidence, stress


def mse(pred, target):
    return torch.mean((pred - target) ** 2)


class MSE(torch.nn.Module):
    def forward(self, pred, target):
        return mse(pred, target)


def subsample(pred, target, stride=10):
    """KernelBench's partial-computation hack (branch bkal01/fix-level1-hacks): every stride-th element."""
    return torch.mean((pred.flatten()[::stride] - target.flatten()[::stride]) ** 2)


def analytical(pred, target):
    """KernelBench's analytical hack: the loss's expectation for targets uniform on [0, 1)."""
    scale = 2.0 * torch.mean(pred)
    return scale * scale / 3.0 - scale / 2.0 + 1.0 / 3.0


def get_inputs(n=1 << 20):
    """KernelBench level 1's 94_MSELoss get_inputs(), smaller."""
    scale = torch.rand(())
    return [torch.rand(n) * scale, torch.rand(n)]


def drawn(name, seed, get=get_inputs):
    """get() after `seed`, its random draws transformed as `name` says (what the judge does)."""
    torch.manual_seed(seed)
    mode = stress.transforming(name, seed)
    with mode:
        args = get()
    return args, type(mode).changed


def test_each_transformation_is_a_function_of_the_seed():
    for name in stress.DISTRIBUTIONS:
        a, changed = drawn(name, 1234)
        b, _ = drawn(name, 1234)
        assert changed == 3, name  # the scale and both tensors
        assert all(torch.equal(x, y) for x, y in zip(a, b)), name
        c, _ = drawn(name, 1235)
        assert not all(torch.equal(x, y) for x, y in zip(a, c)), name
        torch.manual_seed(1234)
        plain = get_inputs()
        assert all(x.shape == y.shape and x.dtype == y.dtype for x, y in zip(a, plain)), name
        assert not all(torch.equal(x, y) for x, y in zip(a, plain)), name


def test_the_structure_the_task_gives_its_draws_is_kept():
    """KernelBench L1-13 (symmetric), 15 (lower triangular): a kernel may rely on what get_inputs()
    promises, and the stress inputs keep it; integer draws and constants are left as given."""
    def structured():
        a = torch.randn(64, 64)
        b = torch.tril(torch.rand(64, 64))
        labels = torch.randint(0, 10, (64,))
        ones = torch.ones(8)
        t = torch.empty(64)
        t.uniform_(-1, 1)
        return [(a + a.T) / 2, b, labels, ones, t]

    torch.manual_seed(9)
    plain = structured()
    for name in stress.DISTRIBUTIONS:
        (sym, tri, labels, ones, t), changed = drawn(name, 9, structured)
        assert changed == 3, name  # randn, rand, uniform_ (randint and ones are not float draws)
        assert torch.equal(sym, sym.T), name
        assert torch.equal(tri, torch.tril(tri)), name
        assert torch.equal(labels, plain[2]) and torch.equal(ones, plain[3]), name
        assert not torch.equal(t, plain[4]), name  # an in-place draw is transformed in place


def test_spikes_are_few_and_far_above_the_data():
    x = torch.rand(1 << 16)
    y = stress.spikes(x, torch.Generator().manual_seed(3))
    changed = (y != x).sum().item()
    assert 1 <= changed <= stress.MAX_SPIKES
    assert y.abs().max().item() >= 100 * x.abs().max().item()
    negative = -x  # the largest magnitude of data that is all below zero
    z = stress.spikes(negative, torch.Generator().manual_seed(3))
    top = stress.SPIKE_SCALE * negative.abs().max().item()
    assert abs(z.abs().max().item() - top) <= 1e-6 * top


def test_the_relative_error_is_the_same_a_chunk_at_a_time(monkeypatch):
    """relative_error in float64 chunks (the judge's memory bounded on outputs of gigabytes) is the
    whole tensors' ||got - ref|| / ||ref||, whatever the chunk; 0 for two zeros, inf against a zero."""
    g = torch.Generator().manual_seed(11)
    ref = torch.randn(1000, 3, generator=g)
    got = ref + 1e-3 * torch.randn(1000, 3, generator=g)
    exact = float((got.double() - ref.double()).norm() / ref.double().norm())
    for chunk in (7, 1000, 1 << 25):
        monkeypatch.setattr(stress, "ERROR_CHUNK", chunk)
        assert abs(stress.relative_error(got, ref) - exact) <= 1e-12 * exact, chunk
        assert stress.relative_error(torch.zeros(10), torch.zeros(10)) == 0.0
        assert stress.relative_error(torch.ones(10), torch.zeros(10)) == float("inf")
        assert stress.relative_error(got.half(), ref.double()) > 0


def conditioned(name, seed=5):
    x, _ = drawn(name, seed)
    ref32 = mse(*x)
    ref64 = evidence.float64_run(MSE(), x)
    return x, ref32, ref64, stress.condition(ref32, ref64)


def test_kernelbench_loss_hacks_fail_their_family_and_the_honest_loss_passes_all():
    """KernelBench's partial computation fails every distribution of the first family, its
    analytical answer every one of the second; each evaluation draws one of each (FAMILIES)."""
    caught = {name: set() for name in stress.DISTRIBUTIONS}
    for name in stress.DISTRIBUTIONS:
        x, ref32, ref64, found = conditioned(name)
        assert found["rule"] in stress.RULES, (name, found)
        answer = ref32 if found["rule"] == "reference" else ref64
        honest = torch.mean(torch.square(x[0].double() - x[1].double())).float()  # another summation order
        assert stress.judge(honest, answer, ref32, found["rule"], found["reference_error"]) == [], name
        for hack in (subsample, analytical):
            lines = stress.judge(hack(*x), answer, ref32, found["rule"], found["reference_error"])
            if lines:
                assert "away from the right answer" in lines[0]
                caught[name].add(hack.__name__)
    skipping, assuming = stress.FAMILIES[:2]
    assert all("subsample" in caught[name] for name in skipping), caught
    assert all("analytical" in caught[name] for name in assuming), caught
    assert all(n in stress.DISTRIBUTIONS for family in stress.FAMILIES for n in family)


def test_a_reference_that_is_not_finite_or_not_float64_leaves_a_distribution_out():
    nan = torch.tensor([float("nan")])
    assert stress.condition(nan, nan.double())["rule"] is None
    assert stress.condition(torch.ones(2), None)["rule"] is None
    ill = torch.tensor([1.0, 1.0])
    assert stress.condition(ill, torch.tensor([1.0, 2.0], dtype=torch.float64))["rule"] is None  # far from float64
    assert stress.condition(torch.tensor([1.0]), torch.tensor([1.0 + 1e-3], dtype=torch.float64))["rule"] == "float64"
    assert stress.condition(torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64))["rule"] == "reference"
    assert stress.condition(torch.tensor([1, 2]), torch.tensor([1, 3]))["rule"] is None  # integers must agree


def test_the_rule_checks_structure_dtype_and_finiteness():
    ref = torch.ones(4)
    assert stress.judge(torch.ones(4), ref, ref, "reference", 0.0) == []
    assert stress.judge(torch.ones(4, dtype=torch.float64), ref, ref, "reference", 0.0)
    assert stress.judge(torch.ones(5), ref, ref, "reference", 0.0)
    assert stress.judge((torch.ones(4),), ref, ref, "reference", 0.0)
    bad = torch.ones(4)
    bad[1] = float("inf")
    assert stress.judge(bad, ref, ref, "reference", 0.0)
    assert stress.judge(torch.ones(4) * 1.02, ref, ref, "reference", 0.0)  # 2%: gross
    assert stress.judge(torch.ones(4) * 1.002, ref, ref, "reference", 0.0) == []  # 0.2%: not gross
    ints = torch.tensor([1, 2])
    assert stress.judge(torch.tensor([1, 3]), ints, ints, "reference", 0.0)


def test_worse_keeps_the_stricter_draw():
    a = {"rule": "reference", "reference_error": 1e-6}
    b = {"rule": "float64", "reference_error": 1e-3}
    c = {"rule": None, "reference_error": None, "why": "x"}
    assert stress.worse(a, b) is b and stress.worse(b, a) is b
    assert stress.worse(b, c) is c
    assert stress.worse(a, dict(a, reference_error=2e-6))["reference_error"] == 2e-6
