"""Output comparison of the evaluation runner (docs/runner-protocol.md, step 6): pure functions.

compare(got, expected, tolerance) walks both values together and returns the mismatch report as a
list of lines (empty: they match). Structure first (tensor, tuple/list of equal length, dict with
equal keys, scalars of equal type and value), then each tensor's device type, shape and dtype, then
its values: with the tolerance entry {atol, rtol, norm} of the expected tensor's dtype,

    |got - expected| <= atol + rtol * |expected|          for every element, and
    ||got - expected|| / ||expected|| <= norm              (L2 norms; skipped when ||expected|| == 0
                                                             or norm is absent)

computed in float64 (complex128 for complex tensors) on the tensors' device, in chunks so a huge
output needs no float64 copy of itself. NaN and Inf in `got` never pass. A dtype with no entry in
the tolerance (integers, bool, float8, complex) is compared exactly.

A line names where it is (`output`, `output 0`, `output 0.1`, `output 'key'`) and reads, e.g.
    output 0: 1523 of 1048576 elements differ; first at index (3, 17): got 0.5123, expected 0.6001;
    max abs error 0.0878 at (3, 17); max rel error 0.146; tolerance atol=1e-4 rtol=1e-4 (preset strict)
(one line). The max rel error is taken over the elements whose expected value is not zero. When
only the norm rule fails, the line reads `output: relative error norm 3.1e-5 exceeds norm=1e-5; max
abs error ...; max rel error ...; tolerance atol=1e-4 rtol=1e-4 norm=1e-5 (preset strict)`.

nonfinite(value) says whether a value holds NaN or Inf (the reference check of step 4);
changed_elements(a, b) compares two tensors bitwise (the input-mutation check of step 5).
"""
import hashlib
import math

CHUNK = 1 << 24  # elements per float64 chunk: 128 MiB per temporary
MAX_LINES = 3    # mismatching outputs listed before "... and N more"


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def fmt_num(x):
    """A value or an error in a report: 4 significant digits, compact exponent (3.2e-5)."""
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, complex):
        return "(%s%s%sj)" % (fmt_num(x.real), "+" if x.imag >= 0 or math.isnan(x.imag) else "-",
                              fmt_num(abs(x.imag)))
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return _compact_exponent("%.4g" % x)


def fmt_tol(x):
    """A tolerance: 1e-4, 5e-3, 0.01, 0.5."""
    if x == 0:
        return "0"
    if abs(x) < 0.01 or abs(x) >= 1e4:
        return _compact_exponent("%.2e" % x)
    return "%g" % x


def _compact_exponent(text):
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    sign = "-" if exponent.startswith("-") else "+"
    return "%se%s%s" % (mantissa, sign, exponent.lstrip("+-").lstrip("0") or "0")


def fmt_index(index):
    """An element index as a Python tuple: (3, 17), (5,), ()."""
    return str(tuple(index))


def _unravel(flat, shape):
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


def _child(where, key):
    """The name of an element of `where`: output -> output 0 -> output 0.1; dict keys quoted."""
    part = repr(key) if isinstance(key, str) else str(key)
    if " " in where:
        return "%s.%s" % (where, part)
    return "%s %s" % (where, part)


def _kind(value):
    """How a value is named in a structure mismatch."""
    import torch

    if isinstance(value, torch.Tensor):
        if type(value) in (torch.Tensor, torch.nn.Parameter):
            return "a tensor"
        return "a tensor subclass %s" % type(value).__name__
    if value is None:
        return "None"
    if isinstance(value, (tuple, list)):
        return "a %s of %d items" % (type(value).__name__, len(value))
    if isinstance(value, dict):
        return "a dict of %d keys" % len(value)
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return "%s %s" % (type(value).__name__, text)


def _is_plain_tensor(value):
    import torch

    return type(value) in (torch.Tensor, torch.nn.Parameter)


def tolerance_for(tolerance, dtype):
    """(atol, rtol, norm or None) for `dtype` from the request's tolerance object; None: exact."""
    entry = (tolerance or {}).get(dtype_name(dtype))
    if not isinstance(entry, dict):
        return None
    norm = entry.get("norm")
    return float(entry.get("atol", 0.0)), float(entry.get("rtol", 0.0)), None if norm is None else float(norm)


def _tolerance_text(tol, preset, dtype, with_norm=False):
    suffix = " (preset %s)" % preset if preset else ""
    if tol is None:
        return "tolerance exact (%s)%s" % (dtype_name(dtype), suffix)
    atol, rtol, norm = tol
    text = "tolerance atol=%s rtol=%s" % (fmt_tol(atol), fmt_tol(rtol))
    if with_norm and norm is not None:
        text += " norm=%s" % fmt_tol(norm)
    return text + suffix


def compare(got, expected, tolerance=None, where="output", limit=MAX_LINES):
    """The mismatch report of `got` against `expected` as a list of lines; [] when they match.

    `tolerance` is the request's tolerance object ({"preset": name, dtype name: {atol, rtol, norm}}).
    """
    preset = (tolerance or {}).get("preset", "")
    lines = []
    _walk(got, expected, tolerance, preset, where, lines)
    if len(lines) > limit:
        lines = lines[:limit] + ["... and %d more outputs differ" % (len(lines) - limit)]
    return lines


def _walk(got, expected, tolerance, preset, where, lines):
    # The recursion follows `expected` (the reference's output), so it ends.
    import torch

    if isinstance(expected, torch.Tensor):
        if not (isinstance(got, torch.Tensor) and _is_plain_tensor(got)):
            lines.append("%s: got %s, expected a tensor" % (where, _kind(got)))
            return
        line = compare_tensor(got, expected, tolerance, preset, where)
        if line:
            lines.append(line)
        return
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)):
            lines.append("%s: got %s, expected %s" % (where, _kind(got), _kind(expected)))
            return
        if len(got) != len(expected):
            lines.append("%s: got %s, expected %s" % (where, _kind(got), _kind(expected)))
            return
        for i, (g, e) in enumerate(zip(got, expected)):
            _walk(g, e, tolerance, preset, _child(where, i), lines)
        return
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            lines.append("%s: got %s, expected %s" % (where, _kind(got), _kind(expected)))
            return
        if set(got) != set(expected):
            missing = sorted(map(repr, set(expected) - set(got)))
            extra = sorted(map(repr, set(got) - set(expected)))
            parts = []
            if missing:
                parts.append("missing keys " + ", ".join(missing))
            if extra:
                parts.append("unexpected keys " + ", ".join(extra))
            lines.append("%s: dict keys differ: %s" % (where, "; ".join(parts)))
            return
        for key in expected:
            _walk(got[key], expected[key], tolerance, preset, _child(where, key), lines)
        return
    # Scalars (and anything else): same type, equal value; a float NaN never passes.
    if type(got) is not type(expected):
        lines.append("%s: got %s, expected %s" % (where, _kind(got), _kind(expected)))
        return
    try:
        equal = bool(got == expected)
    except Exception:  # noqa: BLE001 - an object whose == raises is simply unequal
        equal = False
    if isinstance(got, float) and math.isnan(got):
        equal = False
    if not equal:
        lines.append("%s: got %s, expected %s" % (where, _kind(got), _kind(expected)))


def compare_tensor(got, expected, tolerance=None, preset="", where="output"):
    """One report line for two tensors, or "" when `got` passes."""
    if got.device.type != expected.device.type:
        return "%s: on device %s, expected %s" % (where, got.device.type, expected.device.type)
    if tuple(got.shape) != tuple(expected.shape):
        return "%s: shape %s, expected %s" % (where, list(got.shape), list(expected.shape))
    if got.dtype != expected.dtype:
        return "%s: dtype %s, expected %s" % (where, dtype_name(got.dtype), dtype_name(expected.dtype))
    numel = expected.numel()
    if numel == 0:
        return ""
    tol = tolerance_for(tolerance, expected.dtype)
    if tol is not None and _clearly_within(got.detach(), expected.detach(), tol):
        return ""
    stats = _tensor_stats(got.detach(), expected.detach(), tol)
    if stats["bad"]:
        return "%s: %d of %d elements differ; first at index %s: got %s, expected %s; %s; %s" % (
            where, stats["bad"], numel, fmt_index(_unravel(stats["first"], expected.shape)),
            fmt_num(stats["first_got"]), fmt_num(stats["first_expected"]),
            _error_text(stats, expected.shape), _tolerance_text(tol, preset, expected.dtype))
    if tol is not None and tol[2] is not None and stats["ref_sq"] > 0:
        ratio = math.sqrt(stats["diff_sq"]) / math.sqrt(stats["ref_sq"])
        if not ratio <= tol[2]:
            return "%s: relative error norm %s exceeds norm=%s; %s; %s" % (
                where, fmt_num(ratio), fmt_tol(tol[2]), _error_text(stats, expected.shape),
                _tolerance_text(tol, preset, expected.dtype, with_norm=True))
    return ""


# The fast path's margin: what its float32 arithmetic can be off by, many times over.
_FAST_MARGIN = 1.0 - 1e-4


def _clearly_within(got, expected, tol):
    """Whether `got` passes against `expected` beyond doubt, computed in the outputs' own precision
    (float32 for half types, float64 for float64; about five times faster on a CPU than the exact
    float64 walk of _tensor_stats): every element finite and within the elementwise rule, and the
    norm rule, each with a margin far above the rounding of this arithmetic. False decides nothing:
    the exact walk then decides, and writes the report."""
    import torch

    if not (got.is_floating_point() and expected.is_floating_point()):
        return False
    atol, rtol, norm = tol
    work = torch.float64 if expected.dtype == torch.float64 else torch.float32
    g_flat, e_flat = got.reshape(-1), expected.reshape(-1)
    diff_sq, ref_sq = 0.0, 0.0
    for start in range(0, g_flat.numel(), CHUNK):
        g = g_flat[start:start + CHUNK].to(work)
        e = e_flat[start:start + CHUNK].to(work)
        diff = (g - e).abs_()
        bound = e.abs().mul_(rtol).add_(atol).mul_(_FAST_MARGIN)
        if not bool((diff <= bound).all()) or not bool(torch.isfinite(g).all()):  # NaN or Inf: the exact rule
            return False
        if norm is not None:
            diff_sq += float(torch.linalg.vector_norm(diff)) ** 2
            ref_sq += float(torch.linalg.vector_norm(e)) ** 2
    if norm is not None and ref_sq > 0 and math.isfinite(ref_sq):
        return math.sqrt(diff_sq) <= norm * _FAST_MARGIN * math.sqrt(ref_sq)
    return norm is None or ref_sq == 0


def _error_text(stats, shape):
    text = "max abs error %s at %s" % (fmt_num(stats["max_abs"]), fmt_index(_unravel(stats["max_abs_at"], shape)))
    text += "; max rel error %s" % (fmt_num(stats["max_rel"]) if stats["max_rel"] is not None else "n/a")
    if stats["nan"] or stats["inf"]:
        text += "; the output holds %d NaN and %d Inf" % (stats["nan"], stats["inf"])
    return text


def _tensor_stats(got, expected, tol):
    """Error statistics over the flattened tensors, chunk by chunk.

    bad: elements failing the elementwise rule (exact equality when tol is None); first: flat index
    of the first; max_abs (+ max_abs_at), max_rel over nonzero expected values; diff_sq and ref_sq:
    squared L2 norms of got - expected and of expected; nan, inf: counts in `got`.
    """
    import torch

    wide = torch.complex128 if (got.is_complex() or expected.is_complex()) else torch.float64
    g_flat = got.reshape(-1)
    e_flat = expected.reshape(-1)
    inf = float("inf")
    stats = {"bad": 0, "first": None, "first_got": None, "first_expected": None,
             "max_abs": -1.0, "max_abs_at": 0, "max_rel": None, "diff_sq": 0.0, "ref_sq": 0.0,
             "nan": 0, "inf": 0}
    for start in range(0, g_flat.numel(), CHUNK):
        g = g_flat[start:start + CHUNK]
        e = e_flat[start:start + CHUNK]
        gw = g.to(wide)
        ew = e.to(wide)
        diff = (gw - ew).abs()
        if tol is None:
            ok = g == e
            if g.is_floating_point() or g.is_complex():
                ok &= torch.isfinite(g)
        else:
            atol, rtol, _ = tol
            ok = (diff <= atol + rtol * ew.abs()) & torch.isfinite(gw)
        if g.is_floating_point() or g.is_complex():
            stats["nan"] += int(torch.isnan(g).sum())
            stats["inf"] += int(torch.isinf(g).sum())
        diff = torch.nan_to_num(diff, nan=inf, posinf=inf)  # a NaN difference: an infinite error
        bad = ~ok
        n_bad = int(bad.sum())
        if n_bad and stats["first"] is None:
            first = int(bad.to(torch.uint8).argmax())
            stats["first"] = start + first
            stats["first_got"] = g[first].item()
            stats["first_expected"] = e[first].item()
        stats["bad"] += n_bad
        chunk_max = float(diff.max())
        if chunk_max > stats["max_abs"]:
            stats["max_abs"] = chunk_max
            stats["max_abs_at"] = start + int(diff.argmax())
        nonzero = ew != 0
        if bool(nonzero.any()):
            rel = float((diff[nonzero] / ew[nonzero].abs()).max())
            stats["max_rel"] = rel if stats["max_rel"] is None else max(stats["max_rel"], rel)
        stats["diff_sq"] += float((diff * diff).sum())  # inf when `got` holds NaN/Inf
        ew_abs = ew.abs()
        stats["ref_sq"] += float((ew_abs * ew_abs).sum())
    return stats


def nonfinite(value):
    """"NaN" or "Inf" when a (nested) value holds one (NaN first), else None."""
    import torch

    found = set()

    def visit(v, depth):
        if isinstance(v, torch.Tensor):
            if v.is_floating_point() or v.is_complex():
                if bool(torch.isnan(v).any()):
                    found.add("NaN")
                elif bool(torch.isinf(v).any()):
                    found.add("Inf")
        elif isinstance(v, float):
            if math.isnan(v):
                found.add("NaN")
            elif math.isinf(v):
                found.add("Inf")
        elif isinstance(v, (tuple, list)) and depth < 32:
            for x in v:
                visit(x, depth + 1)
        elif isinstance(v, dict) and depth < 32:
            for x in v.values():
                visit(x, depth + 1)

    visit(value, 0)
    return "NaN" if "NaN" in found else ("Inf" if "Inf" in found else None)


CHANGED_CHUNK = 1 << 28  # elements compared at once by changed_elements
DIGEST_CHUNK = 1 << 26  # 4-byte words hashed at once by a GPU's digest
DIGEST_ROW = 1 << 20    # its weights: one row's, made once per device (4 MiB)
_DIGEST_WEIGHTS = {}


def digest(t):
    """A 64-bit hash of t's bytes (in its layout), for seeing, without a copy off its device, whether
    a large tensor changed: on the host the first 8 bytes of their SHA-256; on a GPU weighted_digest.
    The same for the same contents on the same kind of device."""
    import torch

    flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
    if flat.device.type == "cpu":
        return int.from_bytes(hashlib.sha256(flat.numpy()).digest()[:8], "little")
    return weighted_digest(flat)


def _row_weights(device, width):
    import torch

    w = _DIGEST_WEIGHTS.get((device, width))
    if w is None:
        g = torch.Generator(device=device)
        g.manual_seed(0x5EED)
        w = torch.randint(-(1 << 30), 1 << 30, (width,), generator=g, device=device, dtype=torch.int32) | 1
        _DIGEST_WEIGHTS[(device, width)] = w
    return w


def weighted_digest(flat):
    """The hash of a flat uint8 tensor where its bytes are (a GPU's, read in place): its 4-byte words
    in rows of DIGEST_ROW, each word times a fixed odd pseudo-random 32-bit weight modulo 2^32 (the
    products in int32, as read: no widened copy, so a pass costs about three bytes moved per byte
    hashed), each row's products summed in int64, the rows' sums times odd pseudo-random 64-bit
    multipliers of their own summed modulo 2^64, the trailing bytes added; DIGEST_CHUNK words at a
    time. A change of any one word changes it: odd times a nonzero difference is nonzero modulo
    2^32, so its row's sum moves by less than 2^33 but not by 0, and odd times that is nonzero modulo
    2^64. Several changes cancel only by design."""
    import torch

    tail = flat.numel() % 4
    total = int(flat[flat.numel() - tail:].to(torch.int64).sum()) if tail else 0
    words = flat.numel() // 4
    if words == 0:
        return total
    width = min(DIGEST_ROW, words)
    w = _row_weights(flat.device, width)
    rows = -(-words // width)
    g = torch.Generator(device=flat.device)
    g.manual_seed(0x5EED + 1)
    mult = torch.randint(-(1 << 62), 1 << 62, (rows,), generator=g, device=flat.device, dtype=torch.int64) | 1
    per = max(1, DIGEST_CHUNK // width)
    for r0 in range(0, rows, per):
        start, stop = r0 * width, min(words, (r0 + per) * width)
        chunk = flat[4 * start:4 * stop]
        if chunk.data_ptr() % 4:  # a view at an odd offset (fp16 x[1:], bool): its words copied, a chunk at a time
            chunk = chunk.clone()
        v = chunk.view(torch.int32)
        full = (stop - start) // width
        sums = [torch.mul(v[:full * width].view(full, width), w).sum(dim=1, dtype=torch.int64)] if full else []
        if stop - start > full * width:
            sums.append(torch.mul(v[full * width:], w[:stop - start - full * width]).sum(dtype=torch.int64).reshape(1))
        sums = torch.cat(sums) if len(sums) > 1 else sums[0]
        total = (total + int((sums * mult[r0:r0 + sums.numel()]).sum())) % (1 << 64)
    return total


def changed_elements(before, after):
    """How many elements of `after` differ bitwise from `before` (NaN payloads included); a changed
    shape or dtype counts as all elements. 0 means untouched."""
    if (before.dtype != after.dtype or tuple(before.shape) != tuple(after.shape)
            or before.device != after.device):
        return max(before.numel(), after.numel(), 1)
    if before.numel() == 0:
        return 0
    import torch

    item = before.element_size()
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(item)
    a = before.detach().contiguous().reshape(-1)
    b = after.detach().contiguous().reshape(-1)
    if bits is not None:  # one integer of the element's width per element: compared as bits
        a, b = a.view(bits), b.view(bits)
    else:
        a, b = a.view(torch.uint8).reshape(-1, item), b.view(torch.uint8).reshape(-1, item)
    changed = 0
    for i in range(0, a.shape[0], CHANGED_CHUNK):  # in chunks: a large input's mask would take as much again
        ne = a[i:i + CHANGED_CHUNK] != b[i:i + CHANGED_CHUNK]
        changed += int(torch.count_nonzero(ne if ne.dim() == 1 else ne.any(dim=1)))
    return changed
