"""The rates docs/anti-hacking.md states for the checks the judge draws in secret ("Checks the
candidate cannot predict"), measured over many draws of the judge's own selection: a candidate
that computes exactly on some calls only fails as often as the docs say."""
import math
import random
from types import SimpleNamespace

import torch

from anvil import batch, share
from anvil.judge import Judge


def caught_share(imprecise, draws=4000):
    """How often the verification calls Judge.draw_checks picks hit one of `imprecise`."""
    judge = SimpleNamespace(req={"trials": 5})
    hits = 0
    for _ in range(draws):
        Judge.draw_checks(judge)
        hits += bool(judge.precision_at & imprecise)
    return hits / draws


def within(measured, expected, draws=4000):
    """Within four standard errors of a binomial share (a false alarm about once in 16,000 runs)."""
    return abs(measured - expected) <= 4 * math.sqrt(max(expected * (1 - expected), 1e-4) / draws)


def test_precision_is_checked_at_calls_the_candidate_cannot_predict():
    calls = [(i, c) for i in range(5) for c in (0, 1)]
    k = share.checks()["precision_calls"]
    assert k == 2
    for m in (1, 3, 5, 9):
        imprecise = set(calls[-m:])  # exact on the first calls, a shortcut on the last m
        expected = 1 - math.comb(10 - m, k) / math.comb(10, k)
        measured = caught_share(imprecise)
        assert within(measured, expected), (m, measured, expected)
    assert caught_share(set(calls[1:])) == 1.0  # "exact on the first call only": always caught
    # and no call is favoured: each is drawn with probability k / 10
    counts = {call: 0 for call in calls}
    judge = SimpleNamespace(req={"trials": 5})
    for _ in range(4000):
        Judge.draw_checks(judge)
        for call in judge.precision_at:
            counts[call] += 1
    assert all(within(n / 4000, k / 10) for n in counts.values()), counts


def test_a_share_of_wrong_elements_is_seen_by_the_sampled_reads_as_often_as_stated():
    """1 - (1 - q)^SAMPLES per call: the positions batch.draw_positions draws, on an output whose
    share q of elements is wrong."""
    numel = 1 << 16
    g = torch.Generator().manual_seed(random.SystemRandom().randrange(1 << 62))
    for q in (1e-3, 3e-3):
        wrong = torch.rand(numel, generator=g) < q
        q_real = wrong.float().mean().item()
        positions = batch.draw_positions(2000, numel, g)  # 2000 calls' reads
        seen = wrong[positions].any(dim=1).float().mean().item()
        expected = 1 - (1 - q_real) ** batch.SAMPLES
        assert within(seen, expected, 2000), (q, seen, expected)
