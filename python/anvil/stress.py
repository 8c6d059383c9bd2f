"""Inputs the task did not promise: the stress trials (docs/anti-hacking.md, "Inputs beyond the task's").

A task's get_inputs() draws from one distribution (KernelBench's: torch.rand, U[0, 1)), and on it
many wrong programs pass: a loss over a strided subsample of the elements, a closed-form
"expected value" of the loss, ReLU as the identity. Each defended evaluation therefore adds a few
verification calls on inputs get_inputs() never makes. They are made by get_inputs() itself, run
with every float tensor its random draws give (torch.rand, randn, their _like forms, normal, and the
in-place uniform_, normal_ and the like) transformed as it is drawn:

    signed       every element's sign flipped at random
    scaled_up    every element times 1e3
    scaled_down  every element times 1e-3
    heavy        Student-t samples with 2 degrees of freedom (infinite variance) instead
    spikes       the draw with a few elements (at most 64) set to +-1e3 times its largest magnitude:
                 a subsample misses most of them, and only a full pass over the data tells such an
                 input from the task's own

so whatever the task does with its draws afterwards still holds (a torch.tril, a symmetrised A + A.T,
an integer draw, a constant): the inputs keep the structure the task promises and an honest kernel
may rely on, only their values leave the task's distribution. The transformation's randomness comes
from a generator of its own, seeded with the trial's seed, which the judge draws in secret.

Judged wherever the reference itself is well-conditioned there, by a gross-error criterion: the
structure, shapes and dtypes as on every call, every float element finite, integers and booleans
exact, and every float output within GROSS_FLOOR (1%) of the right answer (relative L2). Those
shortcuts miss by far more (a subsample of spiked or heavy-tailed data, an expectation of a
distribution the data no longer has, the identity for a ReLU of signed data); the protocol's own
tolerance is for the task's inputs, where the trials apply it: on heavy-tailed or spiked data an
honest float32 kernel that sums in another order than the reference can miss an elementwise 1e-4
where the reference itself does, which would punish honest work. The right answer (condition()):

    reference   the float32 reference, where it lies within GROSS_FLOOR / GROSS_RATIO of a float64
                run of itself (so within the limit's sixteenth of the truth)
    float64     a float64 run of the reference, where the float32 one lies further (but within
                UNUSABLE_ERROR); the limit is then max(GROSS_FLOOR, GROSS_RATIO x its distance)
    unusable    the reference is not finite there, its integer outputs differ from float64's, it
                does not run in float64, or it lies further than UNUSABLE_ERROR from float64

anvil vet decides each distribution's rule per task on two draws (the worse one counts), cached
with its report (`stress`); the judge picks share/protocol.json's stress_trials of the usable ones
for each evaluation, one of each family in turn (FAMILIES), at random within it, draws them in secret and runs the reference on them (and float64 where the rule asks)
before any candidate code exists. Without vet's rules the judge decides on its own draws.
"""
import math

DISTRIBUTIONS = ("signed", "scaled_up", "scaled_down", "heavy", "spikes")
# Each evaluation's stress trials take one distribution of each family in turn (at random within
# it): the first catches work skipped (a subsample misses spikes; on heavy tails it misses the few
# values that decide), the second work replaced by an assumption about the task's distribution (a
# closed-form expectation, ReLU as the identity on non-negative data), which a subsample survives.
# The third, taken only when an evaluation asks for three or more, catches arithmetic that
# overflows at large magnitudes (an exp without its max subtracted); scaled up alike, a loss
# dominated by one input's square keeps its closed form, so it cannot stand for the second.
FAMILIES = (("spikes", "heavy"), ("signed", "scaled_down"), ("scaled_up",))
SCALE = 1e3
SPIKE_SCALE = 1e3
MAX_SPIKES = 64
GROSS_FLOOR = 1e-2       # a gross error: more than 1% of the output's norm away from the right answer
GROSS_RATIO = 16.0
UNUSABLE_ERROR = 1e-2    # a float32 reference this far from float64 decides nothing
RULES = ("reference", "float64")
# Any finite value of a float dtype passes; integers and booleans compare exactly (the structural
# part of the criterion: the float values are judged by their norm).
LOOSE = {name: {"atol": math.inf, "rtol": 0.0, "norm": None}
         for name in ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")}


def _float(t):
    return t.is_floating_point()


def _generator(device, seed):
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(int(seed) % (1 << 63))
    return g


def signed(t, g):
    import torch

    flip = torch.rand(t.shape, generator=g, device=t.device) < 0.5
    out = torch.ones(t.shape, dtype=t.dtype, device=t.device)
    out.masked_fill_(flip, -1)
    del flip
    return out.mul_(t)  # x * -1 is -x exactly


def student_t2(t, g):
    """Student-t samples, 2 degrees of freedom, of t's shape and dtype: Z / sqrt(V / 2) with
    V ~ chi-square(2), i.e. V / 2 = -log(U) for U uniform."""
    import torch

    work = torch.float64 if t.dtype == torch.float64 else torch.float32
    z = torch.randn(t.shape, generator=g, device=t.device, dtype=work)
    u = torch.rand(t.shape, generator=g, device=t.device, dtype=work)
    half_v = u.clamp_min_(torch.finfo(work).tiny).log_().neg_()  # in place: two sets at most
    return z.div_(half_v.clamp_min_(torch.finfo(work).eps).sqrt_()).to(t.dtype)


def spikes(t, g):
    """t with min(MAX_SPIKES, numel / 64) elements (at least one) at random positions set to +-
    SPIKE_SCALE times t's largest magnitude (or SPIKE_SCALE when t is all zero)."""
    import torch

    n = t.numel()
    out = t.clone()
    if n == 0:
        return out
    count = min(MAX_SPIKES, max(1, n // 64))
    where = torch.randint(0, n, (count,), generator=g, device=t.device)
    sign = torch.randint(0, 2, (count,), generator=g, device=t.device).to(t.dtype).mul_(2).sub_(1)
    lo, hi = (float(v) for v in torch.aminmax(t.detach()))  # one read of t, no |t| made
    top = max(-lo, hi) if math.isfinite(lo) and math.isfinite(hi) else math.nan
    magnitude = SPIKE_SCALE * (top if top > 0 and math.isfinite(top) else 1.0)
    out.view(-1)[where] = sign * magnitude
    return out


def _scale(factor):
    return lambda t, g: t * factor


TRANSFORMS = {"signed": signed, "scaled_up": _scale(SCALE), "scaled_down": _scale(1.0 / SCALE),
              "heavy": student_t2, "spikes": spikes}


# The random draws whose float results are transformed (torch functions and Tensor methods by name).
RANDOM_DRAWS = frozenset(["rand", "randn", "rand_like", "randn_like", "normal", "uniform_", "normal_",
                          "exponential_", "log_normal_", "cauchy_"])


def transforming(name, seed):
    """A context in which the random float tensors torch draws are transformed as distribution
    `name` says (see the module docstring); its `changed` counts them. ValueError for an unknown
    name."""
    from torch.overrides import TorchFunctionMode

    if name not in TRANSFORMS:
        raise ValueError("unknown stress distribution %r (known: %s)" % (name, ", ".join(DISTRIBUTIONS)))
    fn = TRANSFORMS[name]

    class Transforming(TorchFunctionMode):
        changed = 0

        def __init__(self):
            super().__init__()
            self.generators = {}

        def __torch_function__(self, func, types, args=(), kwargs=None):
            import torch

            out = func(*args, **(kwargs or {}))
            if getattr(func, "__name__", None) not in RANDOM_DRAWS or type(out) is not torch.Tensor or \
                    not out.is_floating_point() or out.is_meta or out.numel() == 0:
                return out
            g = self.generators.get(out.device)
            if g is None:
                g = self.generators[out.device] = _generator(out.device, seed)
            new = fn(out.detach(), g)
            Transforming.changed += 1
            if func.__name__.endswith("_"):  # in place: the caller holds `out`
                with torch.no_grad():
                    out.copy_(new)
                return out
            return new.requires_grad_(out.requires_grad) if out.requires_grad else new

    return Transforming()


def draw(harness, name, seed):
    """A stress trial's inputs: `harness`'s task's get_inputs() after `seed`, drawn as its
    fresh_inputs draws them (on the device where the task allows), every random float draw
    transformed as distribution `name` says; with how many draws were transformed (0: get_inputs()
    draws nothing a transformation changes). The judge and the candidate's process draw alike."""
    mode = transforming(name, seed)
    with mode:
        args = harness.fresh_inputs(seed, 1)[0]
    return args, type(mode).changed


def _tensor_leaves(value):
    from anvil.harness import leaves

    import torch

    return [(n, t) for n, t in leaves(value) if isinstance(t, torch.Tensor)]


ERROR_CHUNK = 1 << 25  # elements at once in relative_error's float64 (256 MiB a copy)


def relative_error(got, ref):
    """||got - ref|| / ||ref|| in float64 (0 when both are zero, inf when only ref is), ERROR_CHUNK
    elements at a time: a float64 copy of a 7 GiB output whole would be the judge's largest
    allocation (14 GiB twice), beside an evaluation that holds the rest of the GPU."""
    import torch

    g, r = got.detach().reshape(-1), ref.detach().reshape(-1)
    nums, dens = [], []  # each chunk's norms, joined by math.hypot (no overflow of their squares)
    for start in range(0, max(g.numel(), r.numel()), ERROR_CHUNK):
        gc = g[start:start + ERROR_CHUNK].to(torch.float64)
        rc = r[start:start + ERROR_CHUNK].to(device=gc.device, dtype=torch.float64)
        dens.append(float(torch.linalg.vector_norm(rc)))
        nums.append(float(torch.linalg.vector_norm(gc.sub_(rc))))
        del gc, rc
    num, den = math.hypot(*nums), math.hypot(*dens)
    if den == 0:
        return 0.0 if num == 0 else math.inf
    return num / den


def condition(ref32, ref64):
    """The rule one draw allows: {"rule": "reference" | "float64" | None, "reference_error", "why"},
    from the float32 reference's output and a float64 run of it (ref64: None when the reference
    does not run in float64)."""
    from anvil import output_compare

    import torch

    leaves32 = _tensor_leaves(ref32)
    if not leaves32:
        return {"rule": None, "reference_error": None, "why": "the output holds no tensor"}
    bad = output_compare.nonfinite(ref32)
    if bad:
        return {"rule": None, "reference_error": None, "why": "the reference's output holds %s there" % bad}
    if ref64 is None:
        return {"rule": None, "reference_error": None, "why": "the reference does not run in float64"}
    leaves64 = dict(_tensor_leaves(ref64))
    worst = 0.0
    for name, t in leaves32:
        r = leaves64.get(name)
        if r is None or tuple(r.shape) != tuple(t.shape):
            return {"rule": None, "reference_error": None, "why": "the float64 run's %s differs in shape" % name}
        if not _float(t):
            if not torch.equal(t, r.to(device=t.device, dtype=t.dtype)):
                return {"rule": None, "reference_error": None,
                        "why": "%s (%s) differs from the float64 run's" % (name, output_compare.dtype_name(t.dtype))}
            continue
        if output_compare.nonfinite(r):
            return {"rule": None, "reference_error": None, "why": "the float64 run's %s is not finite" % name}
        worst = max(worst, relative_error(t, r))
    if not worst <= UNUSABLE_ERROR:
        return {"rule": None, "reference_error": worst,
                "why": "the float32 reference is %.3g from float64 (relative L2): ill-conditioned there" % worst}
    rule = "reference" if worst <= GROSS_FLOOR / GROSS_RATIO else "float64"
    return {"rule": rule, "reference_error": worst, "why": ""}


def confirm(ref32, reference_error):
    """The "reference" rule anvil vet decided for this distribution, on one more draw whose float32
    reference is finite (no float64 run): {"rule", "reference_error", "why"}."""
    from anvil import output_compare

    bad = output_compare.nonfinite(ref32)
    if bad or not _tensor_leaves(ref32):
        return {"rule": None, "reference_error": None,
                "why": "the reference's output holds %s there" % bad if bad else "the output holds no tensor"}
    return {"rule": "reference", "reference_error": reference_error, "why": ""}


def worse(a, b):
    """The stricter of two draws' conditions (unusable, then float64, then reference)."""
    rank = {None: 0, "float64": 1, "reference": 2}
    if rank[a["rule"]] != rank[b["rule"]]:
        return a if rank[a["rule"]] < rank[b["rule"]] else b
    return a if (a.get("reference_error") or 0) >= (b.get("reference_error") or 0) else b


def limit(rule, reference_error):
    """The relative L2 distance a candidate may have from the rule's answer."""
    if rule == "reference":
        return GROSS_FLOOR
    return max(GROSS_FLOOR, GROSS_RATIO * (reference_error or 0.0))


def judge(got, answer, like, rule, reference_error):
    """Mismatch lines of a candidate's output on a stress draw (empty: it passes). `answer`: the
    rule's answer (the float32 reference's output, or the float64 run's); `like`: the float32
    reference's output (the structure, shapes and dtypes the candidate's must have)."""
    from anvil import output_compare

    lines = output_compare.compare(got, like, LOOSE)
    if lines:
        return lines
    most = limit(rule, reference_error)
    got_leaves = dict(_tensor_leaves(got))
    for name, r in _tensor_leaves(answer):
        g = got_leaves.get(name)
        if g is None or not _float(g):
            continue
        err = relative_error(g, r)
        if not err <= most:
            return ["%s is %.3g away from the right answer (relative L2; at most %.3g allowed: a gross error)"
                    % (name, err, most)]
    return []
