"""Score block-length rules offline: the automatic drift block length's pilot measurements
(every candidate length's blocks) and every fixed length's error, kept per stack, so that a
new rule is scored on all of them in seconds instead of measuring again (issue 27 item 3).

A rule is a function of one kept stack (``measured``, the pilot's block measurements per
candidate, as :func:`choose_block_length` takes them; ``n``; ``truth``) returning a length;
its error on that stack is the fixed length's (the automatic estimate measures with that
fixed length, byte for byte). Built in: ``current`` (the shipped :func:`choose_block_length`:
since 2026-11-30 the pooled bias of ``_drift_pooled_bias.pooled_bias``), ``goldenshluger-lepski``
(the rule shipped before it, 2026-11-29 to 30: the largest excess of one comparison of the
candidates' traces over ``KAPPA^2`` times its noise), ``stand-in-bias`` (the rule shipped
before that: the bias of each candidate's construction applied to a finer trace standing in
for the drift, fitted as ``b L^4``), ``true-bias`` (the rule's fitted noise law ``a / L``
with the bias of each candidate's construction applied to the *true* drift: what a perfect
bias estimate would reach; not a rule, a bound on what improving the bias can give), and the
two below.

Run (CPU, one thread; the stacks and their numbers are the benchmark's,
benchmarks/drift_block_length.py)::

    # keep seeds 101-106 (pilot and every fixed length; ~10 min on a shared 2-core machine)
    python benchmarks/drift_block_length_rules.py collect new.pkl --seeds 101 102 103 104 105 106
    # seeds 1-8 with the fixed lengths' errors of the saved records (pilots only)
    python benchmarks/drift_block_length_rules.py collect dev.pkl --seeds 1 2 3 4 5 6 7 8 \\
        --fixed-from benchmarks/drift_block_length_records.json
    python benchmarks/drift_block_length_rules.py score new.pkl   # every rule's table
    # seeds 201-206, on which the Goldenshluger-Lepski rule was judged
    python benchmarks/drift_block_length_rules.py collect fresh.pkl --seeds 201 202 203 204 205 206
    # several kept sets together, with each case's paired difference from the current rule
    python benchmarks/drift_block_length_rules.py score dev.pkl new.pkl --against current
    # kept stacks as records for ``drift_block_length.py --load`` (the fixed lengths' errors)
    python benchmarks/drift_block_length_rules.py records new.pkl new.json \\
        --rules goldenshluger-lepski

``pooled-bias`` and ``pooled-bias-null90`` are the rules tried on 2026-11-30
(benchmarks/runs/2026-11-30-cpu-drift-block-rule.md): the bias of each candidate fitted over
every shorter candidate (weighted least squares, bias ``~ L^2``) instead of the largest
excess over two standard deviations. ``pooled-bias`` was adopted: it is this script's own
implementation of the shipped rule, kept as a check (it chooses as ``current`` on every kept
stack of the five sets).

The ``.pkl`` files are local caches (Python pickles): read only your own.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "compute"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from drift_block_length import fixed_length_errors, summarise, table  # noqa: E402
from esrrf_drift_sim import blinking_drifting_stack  # noqa: E402
from test_esrrf_drift_auto import drifts  # noqa: E402

from napari_gpuscope.compute.esrrf import DriftParams, _drift_auto  # noqa: E402
from napari_gpuscope.compute.esrrf._drift_blocks import auto_lengths  # noqa: E402
from napari_gpuscope.compute.jobs import run_job  # noqa: E402

Kept = dict  # one stack: measured, n, truth, fixed, chosen, pilot_seconds
Rule = Callable[[Kept], int]


def pilot_measurements(stack: np.ndarray) -> tuple[dict, int]:
    """The pilot's block measurements per candidate length and the shipped rule's choice."""
    kept: dict = {}
    shipped = _drift_auto.choose_block_length

    def keep(measured: dict, n: int, smoothing: float = 0.0, **options: object):
        kept["measured"] = measured
        return shipped(measured, n, smoothing, **options)

    _drift_auto.choose_block_length = keep  # the pilot calls it by its module name
    try:
        job = _drift_auto._pilot(
            stack, DriftParams(time_averaging=None), auto_lengths(len(stack)), None, None,
            "stack", "cpu",
        )  # fmt: skip
        choice = run_job(job)
    finally:
        _drift_auto.choose_block_length = shipped
    return kept["measured"], choice.length


def collect(path: Path, frames: list[int], seeds: list[int], fixed_from: Path | None) -> None:
    """Keep every (frames, drift, seed) stack's pilot measurements and fixed-length errors in
    ``path`` (resumed: stacks already kept are skipped)."""
    saved = {}
    if fixed_from:
        for r in json.loads(fixed_from.read_text()):
            fixed = {int(k): float(v) for k, v in r["fixed"].items()}
            saved[r["frames"], r["drift"], r["seed"]] = fixed
    store = pickle.loads(path.read_bytes()) if path.exists() else {}
    for n in frames:
        for kind, truth in drifts(n).items():
            for seed in seeds:
                if (n, kind, seed) in store:
                    continue
                stack, _ = blinking_drifting_stack(truth, shape=(48, 48), n_emitters=60, seed=seed)
                start = time.perf_counter()
                measured, chosen = pilot_measurements(stack)
                seconds = time.perf_counter() - start
                fixed = saved.get((n, kind, seed))
                if fixed is None:
                    fixed = fixed_length_errors(stack, truth)
                store[n, kind, seed] = {
                    "measured": measured, "n": n, "truth": truth, "fixed": fixed,
                    "chosen": chosen, "pilot_seconds": seconds,
                }  # fmt: skip
                path.write_bytes(pickle.dumps(store))
                print(n, kind, seed, "chosen", chosen, f"pilot {seconds:.1f} s", flush=True)


def current(kept: Kept) -> int:
    """The shipped rule (since 2026-11-30 the pooled bias: :func:`_pooled` without a test)."""
    return _drift_auto.choose_block_length(kept["measured"], kept["n"]).length


def block_means(trace: np.ndarray, blocks: list[tuple[int, int]]) -> np.ndarray:
    """The mean of ``trace`` over each block's frames."""
    return np.array([trace[first:stop].mean(0) for first, stop in blocks])


KAPPA = 2.0
"""Goldenshluger-Lepski's noise standard deviations not counted as bias (chosen on seeds 1-8)."""


def goldenshluger_lepski_parts(
    traces: dict[int, np.ndarray], a: float, kappa: float = KAPPA
) -> dict[int, tuple[float, float]]:
    """Each candidate's ``(noise, bias)`` RMS (px) by Goldenshluger-Lepski (Goldenshluger &
    Lepski 2011, Ann. Statist. 39:1608): noise ``sqrt(a / L)``, squared bias the largest
    excess of ``|d_L - d_S|^2`` over ``kappa^2 a (1/S - 1/L)`` among the shorter ``S``,
    floored at 0 (the rule shipped from 2026-11-29 to 2026-11-30)."""
    lengths = sorted(traces)
    parts = {}
    for i, length in enumerate(lengths):
        excess = [
            math.sqrt(float(np.mean((traces[length] - traces[short]) ** 2))) ** 2
            - kappa**2 * (a * (1.0 / short - 1.0 / length))
            for short in lengths[:i]
        ]
        parts[length] = (math.sqrt(a / length), math.sqrt(max([0.0, *excess])))
    return parts


def _kept_candidates(kept: Kept) -> tuple[int, list[int], float, dict[int, np.ndarray]]:
    """The shipped rule's view of a kept stack: its choice, the lengths it kept (after the
    outlier cut; none when no length could be compared, and the choice stands), the noise
    law's ``a`` and each kept length's trace."""
    measured, n = kept["measured"], kept["n"]
    choice = _drift_auto.choose_block_length(measured, n)
    if not choice.parts:
        return choice.length, [], math.nan, {}
    lengths = sorted(choice.parts)
    a = float(np.median([choice.parts[L][0] ** 2 * L for L in lengths]))
    traces = {L: _drift_auto._trace(*measured[L][:2], n, 0.0, measured[L][2]) for L in lengths}
    return choice.length, lengths, a, traces


def goldenshluger_lepski(kept: Kept) -> int:
    """The rule shipped before the pooled bias: the shipped noise law and outlier cut, the
    bias :func:`goldenshluger_lepski_parts`, the least ``noise^2 + bias^2``."""
    length, lengths, a, traces = _kept_candidates(kept)
    if not lengths:
        return length
    parts = goldenshluger_lepski_parts(traces, a)
    return min(lengths, key=lambda L: math.sqrt(sum(p**2 for p in parts[L])))


def _usable(measured: dict, n: int) -> dict:
    """The candidates :func:`choose_block_length` can use (measured, covering 90 %)."""
    usable = {length: m for length, m in measured.items() if m is not None}
    if usable:
        most = max(m[3] for m in usable.values())
        usable = {length: m for length, m in usable.items() if m[3] >= 0.9 * most}
    return usable


def true_bias(kept: Kept) -> int:
    """The shipped noise law with the bias of the true drift: a bound, not a rule."""
    measured, n = kept["measured"], kept["n"]
    usable = _usable(measured, n)
    if len(usable) < 3:
        return current(kept)
    choice = _drift_auto.choose_block_length(measured, n)
    a = float(np.median([noise**2 * length for length, (noise, _) in choice.parts.items()]))
    scores = {}
    for length in sorted(usable):
        centres, _, errors, _, blocks = usable[length]
        means = block_means(kept["truth"], blocks)
        trace = _drift_auto._trace(centres, means, n, 0.0, errors)
        scores[length] = a / length + float(np.mean((trace - kept["truth"]) ** 2))
    return min(scores, key=scores.__getitem__)


def stand_in_bias(kept: Kept, draws: int = 24) -> int:
    """The rule shipped before Goldenshluger-Lepski (docs/esrrf.md, "Automatic block
    length"): Monte Carlo noise fitted as ``a / L``; bias of each candidate's construction
    applied to the least noisy of the finer half of the usable traces, less that trace's own
    noise's expected share, fitted as ``b L^4``; the minimum of ``a / L + b L^4``."""
    measured, n = kept["measured"], kept["n"]
    usable = _usable(measured, n)
    if not usable:
        return max(measured)
    trace, means = _drift_auto._trace, block_means
    rng = np.random.default_rng(0)
    noise = {
        length: float(
            np.mean([np.mean(trace(c, rng.normal(0.0, e), n, 0.0, e) ** 2) for _ in range(draws)])
        )
        for length, (c, _, e, _, _) in sorted(usable.items())
    }
    finer = sorted(usable)[: max(1, (len(usable) + 1) // 2)]
    finest = min(finer, key=noise.__getitem__)
    f_centres, f_values, f_errors, _, _ = usable[finest]
    reference = trace(f_centres, f_values, n, 0.0, f_errors)
    draws_ = [trace(f_centres, rng.normal(0.0, f_errors), n, 0.0, f_errors) for _ in range(draws)]
    bias = {}
    for length, (centres, _, errors, _, blocks) in sorted(usable.items()):

        def construction(d: np.ndarray) -> np.ndarray:
            return trace(centres, means(d, blocks), n, 0.0, errors) - d  # noqa: B023

        raw = float(np.mean(construction(reference) ** 2))
        expected = float(np.mean([np.mean(construction(d) ** 2) for d in draws_]))
        bias[length] = max(raw - expected, 0.0)
    lengths = np.array(sorted(usable), np.float64)
    if len(lengths) < 3:
        return min(usable, key=lambda length: noise[length] + bias[length])
    a = float(np.median([noise[int(length)] * length for length in lengths]))
    b2 = np.array([bias[int(length)] for length in lengths])
    b = float(np.sum(b2 * lengths**4) / np.sum(lengths**8))
    return int(lengths[int(np.argmin(a / lengths + b * lengths**4))])


def _pooled(kept: Kept, quantile: float | None, draws: int = 48) -> int:
    """The shipped noise law and outlier cut with the bias of each candidate ``L`` pooled
    over every shorter kept candidate ``S`` instead of Goldenshluger-Lepski's largest excess
    over ``kappa^2`` noise: a smooth drift's bias grows as ``L^2`` (curvature), so
    ``E|d_L - d_S|^2 = v + (1 - (S/L)^2)^2 bias_L^2`` with ``v = a (1/S - 1/L)``; ``bias_L^2``
    is the weighted least-squares fit of that (weights ``1/v``), floored at 0. With
    ``quantile``, it counts only above that quantile of the same fit on ``draws`` Monte Carlo
    traces without drift (white noise per frame of the blocks' median variance per frame,
    nested: every candidate averages the same draw)."""
    measured, n = kept["measured"], kept["n"]
    length, lengths, a, traces = _kept_candidates(kept)
    if not lengths:
        return length
    sims: dict[int, list[np.ndarray]] = {L: [] for L in lengths}
    if quantile is not None:
        per_frame = float(np.median([np.nanmedian(measured[L][2] ** 2 * L) for L in lengths]))
        rng = np.random.default_rng(1)
        for _ in range(draws):
            frames = rng.normal(0.0, math.sqrt(per_frame), (n, 2))
            for L in lengths:
                centres, _, errors, _, blocks = measured[L]
                means = block_means(frames, blocks)
                sims[L].append(_drift_auto._trace(centres, means, n, 0.0, errors))

    def fit(tr: dict, L: int, shorter: list[int]) -> float:
        num = den = 0.0
        for S in shorter:
            v = a * (1 / S - 1 / L)
            x = (1 - (S / L) ** 2) ** 2
            num += x * (float(np.mean((tr[L] - tr[S]) ** 2)) - v) / v
            den += x * x / v
        return num / den

    scores = {}
    for i, L in enumerate(lengths):
        bias = max(0.0, fit(traces, L, lengths[:i])) if i else 0.0
        if bias > 0 and quantile is not None:
            null = [fit({k: s[j] for k, s in sims.items()}, L, lengths[:i]) for j in range(draws)]
            bias = bias if bias > float(np.quantile(null, quantile)) else 0.0
        scores[L] = a / L + bias
    return min(scores, key=scores.__getitem__)


def pooled_bias(kept: Kept) -> int:
    """:func:`_pooled` without a test (tried for issue 27 item 3, 2026-11-30; adopted: the
    shipped rule, implemented here independently as a check of ``current``)."""
    return _pooled(kept, None)


def pooled_bias_null90(kept: Kept) -> int:
    """:func:`_pooled`, the bias counted above the 90 % quantile of its null draws."""
    return _pooled(kept, 0.9)


RULES: dict[str, Rule] = {
    "current": current, "goldenshluger-lepski": goldenshluger_lepski,
    "stand-in-bias": stand_in_bias, "true-bias": true_bias,
    "pooled-bias": pooled_bias, "pooled-bias-null90": pooled_bias_null90,
}  # fmt: skip


def score(paths: list[Path], rules: list[str], against: str | None = None) -> None:
    """Each rule's table (benchmarks/drift_block_length.py's columns) on the kept stacks of
    ``paths`` together; with ``against``, each case's paired per-stack difference of the
    error from that rule's (mean +- standard error, px)."""
    store = {}
    for path in paths:
        store.update(pickle.loads(path.read_bytes()))
    base = {key: RULES[against](kept) for key, kept in store.items()} if against else {}
    for name in rules:
        cases: dict[tuple[int, str], list[dict]] = {}
        diffs: dict[tuple[int, str], list[float]] = {}
        for (n, kind, seed), kept in sorted(store.items()):
            chosen = RULES[name](kept)
            record = {
                "seed": seed, "auto": kept["fixed"][chosen], "chosen": chosen,
                "fixed": kept["fixed"], "seconds": None,
            }  # fmt: skip
            cases.setdefault((n, kind), []).append(record)
            if against:
                other = kept["fixed"][base[n, kind, seed]]
                diffs.setdefault((n, kind), []).append(record["auto"] - other)
        results = {case: summarise(stacks) for case, stacks in cases.items()}
        misses = sum(r["auto"] > 1.2 * r["best"] for r in results.values())
        mean = np.mean([r["auto"] / r["best"] for r in results.values()])
        print(f"\n{name}: beyond 1.2x the in-sample best in {misses} of {len(results)} cases "
              f"(mean ratio {mean:.3f})")  # fmt: skip
        table(results)
        for (n, kind), d in diffs.items():
            se = float(np.std(d, ddof=1) / math.sqrt(len(d)))
            print(f"{n} {kind}: {name} - {against} {np.mean(d):+.4f} +- {se:.4f} px")


def records(path: Path, out: Path, extra: list[str]) -> None:
    """Write ``path``'s stacks as benchmarks/drift_block_length.py records (``--load``):
    "auto"/"chosen" the current rule's, and ``chosen_<rule>``/``auto_<rule>`` for each of
    ``extra``; "seconds" None (no automatic estimate was timed), "pilot_seconds" kept. An
    existing ``out`` is updated: its rows keep every other field (timings, other rules')."""
    rows = []
    for (n, kind, seed), kept in sorted(pickle.loads(path.read_bytes()).items()):
        row = {"frames": n, "drift": kind, "seed": seed}
        for name in ["current", *extra]:
            chosen = RULES[name](kept)
            suffix = "" if name == "current" else "_" + name.replace("-", "_")
            row["chosen" + suffix], row["auto" + suffix] = chosen, kept["fixed"][chosen]
        row.update(fixed=kept["fixed"], seconds=None, pilot_seconds=kept["pilot_seconds"])
        rows.append(row)
    if out.exists():
        old = json.loads(out.read_text())
        new = {(r["frames"], r["drift"], r["seed"]): r for r in rows}
        for r in old:
            choices = new.pop((r["frames"], r["drift"], r["seed"]), {})
            r.update({k: v for k, v in choices.items() if k.startswith(("chosen", "auto"))})
        rows = old + list(new.values())
    out.write_text(json.dumps(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    keep = commands.add_parser("collect", help="keep stacks' pilots and fixed-length errors")
    keep.add_argument("path", type=Path)
    keep.add_argument("--frames", type=int, nargs="+", default=[100, 200, 500, 1000, 2000])
    keep.add_argument("--seeds", type=int, nargs="+", required=True)
    keep.add_argument("--fixed-from", type=Path, help="fixed errors from --save records")
    scoring = commands.add_parser("score", help="tabulate rules on kept stacks")
    scoring.add_argument("paths", type=Path, nargs="+")
    scoring.add_argument("--rules", nargs="+", default=list(RULES), choices=list(RULES))
    scoring.add_argument("--against", choices=list(RULES), help="paired differences from it")
    saving = commands.add_parser("records", help="kept stacks as --load records (JSON)")
    saving.add_argument("path", type=Path)
    saving.add_argument("out", type=Path)
    saving.add_argument("--rules", nargs="*", default=[], choices=list(RULES))
    args = parser.parse_args()
    if args.command == "collect":
        collect(args.path, args.frames, args.seeds, args.fixed_from)
    elif args.command == "records":
        records(args.path, args.out, args.rules)
    else:
        score(args.paths, args.rules, args.against)


if __name__ == "__main__":
    main()
