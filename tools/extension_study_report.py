#!/usr/bin/env python3
"""The context-extension study's tables and plots from the JSON lines that
experiments/extension/run_study.sh writes.

Per variant, extension factor and evaluation length: the single-needle and multi-key retrieval
by generation and the teacher-forced held-out passkey retrieval and answer loss, as mean +- std
over seeds; the paired difference (same seeds: same base, data order and samples) of every
variant to the strongest method without SSA, with a 95% t interval; the learned sigma(alpha) per
layer and the logit scale its position term gives at each length, against YaRN's and LongRoPE's
fixed factors; the tau^q histograms; wall and CPU times. Every run in the file is reported.

  python3 tools/extension_study_report.py experiments/extension/results/study.jsonl \\
      --out experiments/extension/results [--results-md experiments/extension/RESULTS.md]

writes tables.md and the PNGs retrieval_vs_length_xF.png, loss_vs_length_xF.png,
temperature_vs_length.png and tau_q_xF.png (F: each extension factor); with --results-md the
summary table goes between that file's summary markers. Needs numpy and matplotlib
(tools/requirements.txt).
"""
import argparse
import collections
import json
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# The driver's variants in report order; those without SSA compete for "strongest baseline".
VARIANTS = ["raw", "finetune", "abf", "pi", "yarn", "yarn_ssa", "ssa", "ssa_pos", "clamp",
            "raw_ssa_base", "ssa_base"]
NON_SSA = ["raw", "finetune", "abf", "pi", "yarn"]
# Two-sided 95% Student t quantiles t_{0.975, df}, df = 1..30 (a standard table).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def load(path):
    """(variant, factor) -> seed -> run. A raw variant (factor 1) is every factor's raw row."""
    runs = collections.defaultdict(dict)
    with open(path) as f:
        for number, line in enumerate(f, 1):
            try:
                run = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{number}: not a JSON line ({e})")
            runs[(run["variant"], run["factor"])][run["seed"]] = run
    return runs


def lengths_of(run):
    return sorted(int(n) for n in run["heldout"])


def needle(run, n):
    return 100 * {b["length"]: b["accuracy"] for b in run["needle"]["by_length"]}[n]


def multikey(run, n):
    by_length = {b["length"]: b["accuracy"] for b in run["multikey"]["by_length"]}
    return 100 * by_length[n] if n in by_length else float("nan")


def heldout_set(run, n):
    return run["heldout"][str(n)]["evaluations"][-1]["sets"][0]


def heldout_retrieval(run, n):
    return 100 * heldout_set(run, n)["passkey_retrieval"]


def heldout_loss(run, n):
    return heldout_set(run, n)["loss"]


METRICS = [("needle retrieval % (generated)", needle), ("multi-key retrieval % (generated)",
           multikey), ("held-out retrieval % (teacher-forced)", heldout_retrieval),
           ("held-out answer loss (nats)", heldout_loss)]


def mean_std(values):
    values = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    if len(values) == 0:
        return float("nan"), float("nan")
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0


def paired(runs, reference, metric):
    """Mean paired difference (runs - reference) over their common seeds, its 95% half-width."""
    seeds = sorted(set(runs) & set(reference))
    diffs = np.array([metric(runs[s]) - metric(reference[s]) for s in seeds])
    if len(diffs) < 2:
        return (float(diffs.mean()) if len(diffs) else float("nan")), float("nan"), len(diffs)
    half = T975[min(len(diffs) - 1, len(T975)) - 1] * diffs.std(ddof=1) / math.sqrt(len(diffs))
    return float(diffs.mean()), float(half), len(diffs)


def cells_of(runs, factor):
    """variant -> seed -> run for one extension factor (the raw variants are factor 1)."""
    out = {}
    for variant in VARIANTS:
        key = (variant, 1) if variant in ("raw", "raw_ssa_base") else (variant, factor)
        if key in runs:
            out[variant] = runs[key]
    return out


def strongest_baseline(cells, length):
    """The variant without SSA with the highest mean needle retrieval at the extended length."""
    scored = [(mean_std([needle(r, length) for r in cells[v].values()])[0], v)
              for v in NON_SSA if v in cells]
    scored = [(m, v) for m, v in scored if not math.isnan(m)]
    return max(scored)[1] if scored else None


def fmt(mean, std):
    return "n/a" if math.isnan(mean) else f"{mean:.1f} +- {std:.1f}"


def fmt_diff(mean, half, count):
    if math.isnan(mean):
        return "n/a"
    if count < 2:
        return f"{mean:+.1f} (1 seed)"
    return f"{mean:+.1f} [{mean - half:.1f}, {mean + half:.1f}]"


def factor_tables(factor, cells):
    first = next(iter(next(iter(cells.values())).values()))
    lengths, base = lengths_of(first), first["base_length"]
    target = factor * base
    best = strongest_baseline(cells, target)
    lines = [f"### Extension to {factor}x ({target} tokens from {base})", ""]
    if best:
        lines += [f"Strongest method without SSA at {target} tokens (needle): **{best}**.", ""]
    for title, metric in METRICS:
        shown = [n for n in lengths if metric is not multikey or n >= 4 * base]
        head = "| variant | seeds | " + " | ".join(f"{n}" for n in shown) + " |"
        lines += [f"#### {title}", "", head, "|---|---|" + "---|" * len(shown)]
        for variant, seeds in cells.items():
            row = [variant, str(len(seeds))]
            for n in shown:
                row.append(fmt(*mean_std([metric(r, n) for r in seeds.values()])))
            lines.append("| " + " | ".join(row) + " |")
        if best and metric is not heldout_loss:
            lines += ["", f"Paired difference to {best}, points, 95% t interval:", "",
                      head, "|---|---|" + "---|" * len(shown)]
            for variant, seeds in cells.items():
                if variant == best:
                    continue
                row = [variant, str(len(seeds))]
                for n in shown:
                    row.append(fmt_diff(*paired(seeds, cells[best], lambda r, n=n: metric(r, n))))
                lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    return lines


def sigma_alpha(run):
    """Per layer, the mean over heads of the learned sigma(alpha); None without tau^q."""
    temps = run["needle"].get("temperatures")
    if not temps:
        return None
    return [float(np.mean(layer["sigma_alpha"])) if layer["sigma_alpha"] else float("nan")
            for layer in temps]


def yarn_factor(s):
    return 0.1 * math.log(s) + 1 if s > 1 else 1.0


def longrope_factor(s, base):
    return math.sqrt(1 + math.log(s) / math.log(base)) if s > 1 else 1.0


def position_scale(sigma, n, base):
    """The logit scale SSA's position term gives at position n relative to the base length: tau^q
    multiplies the logits once, so (1 + sigma ln n) / (1 + sigma ln L)."""
    return (1 + sigma * math.log(n)) / (1 + sigma * math.log(base))


def temperature_tables(runs):
    lines = ["### Learned sigma(alpha) per layer against the fixed factors", "",
             "sigma(alpha): mean over heads and seeds (+- std over seeds). The position term's "
             "logit scale at length n relative to L is (1 + sigma ln n) / (1 + sigma ln L); YaRN "
             "and LongRoPE multiply cos and sin by their attention factor, so the logits by its "
             "square. Columns: that scale at 4L and 8L, mean over layers.", "",
             "| variant | factor | seeds | sigma(alpha) per layer | SSA at 4L | SSA at 8L |",
             "|---|---|---|---|---|---|"]
    base = None
    for (variant, factor), seeds in sorted(runs.items(), key=lambda kv: (VARIANTS.index(kv[0][0]),
                                                                        kv[0][1])):
        sigmas = [s for s in (sigma_alpha(r) for r in seeds.values()) if s]
        if not sigmas:
            continue
        base = next(iter(seeds.values()))["base_length"]
        per_layer = np.array(sigmas)  # [seeds, layers]
        spread = per_layer.std(axis=0, ddof=1) if len(sigmas) > 1 else None
        layer_text = ", ".join(f"{m:.4f}" + (f" +- {spread[i]:.4f}" if spread is not None else "")
                               for i, m in enumerate(per_layer.mean(axis=0)))
        scales = [np.mean([position_scale(s, k * base, base) for s in per_layer.ravel()])
                  for k in (4, 8)]
        lines.append(f"| {variant} | {factor} | {len(sigmas)} | {layer_text} | "
                     f"{scales[0]:.3f} | {scales[1]:.3f} |")
    if base:
        lines += ["", "| fixed factor | at 4L | at 8L |", "|---|---|---|"]
        for name, f in (("YaRN attention factor 0.1 ln s + 1", yarn_factor),
                        ("LongRoPE sqrt(1 + ln s / ln L)", lambda s: longrope_factor(s, base))):
            lines.append(f"| {name} | {f(4):.3f} (logits {f(4) ** 2:.3f}) | "
                         f"{f(8):.3f} (logits {f(8) ** 2:.3f}) |")
    return lines + [""]


def time_table(runs):
    lines = ["### Wall and CPU time per run (seconds, mean over seeds)", "",
             "| variant | factor | runs | fine-tune wall | fine-tune CPU | evaluation wall | "
             "evaluation CPU |", "|---|---|---|---|---|---|---|"]
    bases = {}
    for (variant, factor), seeds in sorted(runs.items(), key=lambda kv: (VARIANTS.index(kv[0][0]),
                                                                        kv[0][1])):
        train = np.array([r["train_seconds"] for r in seeds.values()], dtype=float)
        evals = np.array([r["eval_seconds"] for r in seeds.values()], dtype=float)
        lines.append(f"| {variant} | {factor} | {len(seeds)} | {train[:, 0].mean():.0f} | "
                     f"{train[:, 1].mean():.0f} | {evals[:, 0].mean():.0f} | "
                     f"{evals[:, 1].mean():.0f} |")
        kind = "ssa" if variant in ("ssa_base", "raw_ssa_base") else "vanilla"
        for seed, r in seeds.items():
            bases[(kind, seed)] = r["base_seconds"]
    for kind in ("vanilla", "ssa"):
        times = np.array([t for (k, _), t in bases.items() if k == kind], dtype=float)
        if len(times):
            lines.append(f"| base ({kind}) | - | {len(times)} | {times[:, 0].mean():.0f} | "
                         f"{times[:, 1].mean():.0f} | | |")
    return lines + [""]


def summary_table(runs, factors):
    """Needle retrieval at L and at the extended length, with the paired difference there."""
    lines = ["| factor | variant | seeds | needle @L % | needle @target % | vs strongest non-SSA "
             "@target | multi-key @target % | held-out loss @L |",
             "|---|---|---|---|---|---|---|---|"]
    for factor in factors:
        cells = cells_of(runs, factor)
        first = next(iter(next(iter(cells.values())).values()))
        base, target = first["base_length"], factor * first["base_length"]
        best = strongest_baseline(cells, target)
        for variant, seeds in cells.items():
            diff = ("(reference)" if variant == best else
                    fmt_diff(*paired(seeds, cells[best], lambda r: needle(r, target))) if best
                    else "n/a")
            lines.append(
                f"| {factor}x | {variant} | {len(seeds)} | "
                f"{fmt(*mean_std([needle(r, base) for r in seeds.values()]))} | "
                f"{fmt(*mean_std([needle(r, target) for r in seeds.values()]))} | {diff} | "
                f"{fmt(*mean_std([multikey(r, target) for r in seeds.values()]))} | "
                f"{fmt(*mean_std([heldout_loss(r, base) for r in seeds.values()]))} |")
    return lines


def fill_results(path, summary):
    begin, end = "<!-- summary:begin (tools/extension_study_report.py) -->", "<!-- summary:end -->"
    with open(path) as f:
        text = f.read()
    if begin not in text or end not in text:
        raise SystemExit(f"{path} has no {begin} ... {end} markers")
    head, rest = text.split(begin, 1)
    with open(path, "w") as f:
        f.write(head + begin + "\n" + "\n".join(summary) + "\n" + end + rest.split(end, 1)[1])


def save(fig, ax, path):
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=70)
    plt.close(fig)


def plot_by_length(factor, cells, metric, ylabel, name, out):
    fig, ax = plt.subplots(figsize=(6, 4))
    for variant, seeds in cells.items():
        lengths = lengths_of(next(iter(seeds.values())))
        stats = [mean_std([metric(r, n) for r in seeds.values()]) for n in lengths]
        ax.errorbar(lengths, [m for m, _ in stats], yerr=[s for _, s in stats], marker="o",
                    capsize=2, label=f"{variant} ({len(seeds)})")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="evaluation length (tokens)", ylabel=ylabel,
           title=f"extension to {factor}x: {ylabel} vs length")
    save(fig, ax, os.path.join(out, f"{name}_x{factor}.png"))


def plot_temperature(runs, out):
    fig, ax = plt.subplots(figsize=(6, 4))
    base = None
    for (variant, factor), seeds in sorted(runs.items()):
        sigmas = [s for r in seeds.values() for s in (sigma_alpha(r) or [])]
        if not sigmas:
            continue
        base = next(iter(seeds.values()))["base_length"]
        ks = np.linspace(1, 8, 29)
        ax.plot(ks, [np.mean([position_scale(s, k * base, base) for s in sigmas]) for k in ks],
                label=f"{variant} {factor}x (learned)")
    if base is None:
        plt.close(fig)
        return False
    ks = np.linspace(1, 8, 29)
    ax.plot(ks, [yarn_factor(k) ** 2 for k in ks], "k--", label="YaRN (0.1 ln s + 1)^2")
    ax.plot(ks, [longrope_factor(k, base) ** 2 for k in ks], "k:", label="LongRoPE 1 + ln s / ln L")
    ax.set(xlabel="length / L (s)", ylabel="logit scale relative to L",
           title="learned position temperature vs fixed factors")
    save(fig, ax, os.path.join(out, "temperature_vs_length.png"))
    return True


def plot_tau_q(factor, cells, out):
    rows = [(v, [r for r in seeds.values() if r["needle"].get("temperatures")])
            for v, seeds in cells.items()]
    rows = [(v, rs) for v, rs in rows
            if rs and rs[0]["needle"]["temperatures"][0]["query"]["count"]]
    if not rows:
        return False
    layers = len(rows[0][1][0]["needle"]["temperatures"])
    fig, axes = plt.subplots(len(rows), layers, figsize=(2.2 * layers, 1.6 * len(rows)),
                             sharex=True, squeeze=False)
    for i, (variant, rs) in enumerate(rows):
        for layer in range(layers):
            hs = [r["needle"]["temperatures"][layer]["query"] for r in rs]
            counts = np.sum([h["counts"] for h in hs], axis=0)
            edges = hs[0]["bin_low"] + hs[0]["bin_width"] * np.arange(len(counts) + 1)
            ax = axes[i][layer]
            ax.stairs(counts / max(counts.sum(), 1), edges, fill=True)
            ax.set_title(f"{variant} L{layer}", fontsize=7)
            ax.tick_params(labelsize=6)
    fig.suptitle(f"tau^q on the needle prompts, {factor}x models", fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"tau_q_x{factor}.png"), dpi=70)
    plt.close(fig)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--out", required=True)
    parser.add_argument("--results-md", help="RESULTS.md whose summary markers get the table")
    args = parser.parse_args()
    runs = load(args.results)
    if not runs:
        raise SystemExit(f"{args.results} has no runs")
    os.makedirs(args.out, exist_ok=True)
    factors = sorted({f for (_, f) in runs if f > 1}) or [1]
    lines = ["# Context-extension study tables (generated by tools/extension_study_report.py)", ""]
    for factor in factors:
        cells = cells_of(runs, factor)
        lines += factor_tables(factor, cells)
        plot_by_length(factor, cells, needle, "needle retrieval %", "retrieval_vs_length", args.out)
        plot_by_length(factor, cells, heldout_loss, "held-out answer loss", "loss_vs_length",
                       args.out)
        plot_tau_q(factor, cells, args.out)
    lines += temperature_tables(runs) + time_table(runs)
    plot_temperature(runs, args.out)
    with open(os.path.join(args.out, "tables.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if args.results_md:
        fill_results(args.results_md, summary_table(runs, factors))
    print(f"wrote {args.out}/tables.md and the plots of factors {factors}")


if __name__ == "__main__":
    main()
