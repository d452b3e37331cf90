#!/usr/bin/env python3
"""The SSA study's tables and plots from the JSON lines experiments/ssa/run_study.sh writes.

Per task and variant: the held-out (teacher-forced) retrieval at the last step and averaged over
the run's evaluations, token accuracy and loss at the last step and the needle grid's retrieval by
generation at each length, as mean +- std over seeds, and
each variant's paired difference to vanilla (same seeds: same data order and initial weights) with
a 95% t interval; the temperatures' histograms and how often they sit near their bounds; wall
times. Every run in the file is reported (no seed is dropped); a task with fewer seeds for some
variant says so.

  python3 tools/ssa_study_report.py experiments/ssa/results/study.jsonl --out experiments/ssa/results

writes tables.md and the PNGs retrieval_vs_steps_TASK.png, retrieval_vs_length_TASK.png and
temperatures_TASK.png; with --results-md experiments/ssa/RESULTS.md, the compact tables go
between its summary markers. Needs numpy and matplotlib (tools/requirements.txt).
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

VARIANTS = ["vanilla", "ssa", "query_only", "value_only", "position_only", "clamp"]
# Two-sided 95% Student t quantiles t_{0.975, df}, df = 1..30 (a standard table).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def load(path):
    runs = collections.defaultdict(dict)  # task -> variant -> seed -> run
    with open(path) as f:
        for line in f:
            run = json.loads(line)
            runs[run["task"]].setdefault(run["variant"], {})[run["seed"]] = run
    return runs


def evaluations(run):
    return [m for m in run["metrics"] if "eval/passkey_retrieval" in m]


def final_eval(run):
    return evaluations(run)[-1]


def curve_mean(run):
    """The mean held-out retrieval over the run's evaluations: how early it learned, ungated by a
    threshold (a run reaching 100% at step 100 scores more than one reaching it at step 200)."""
    return float(np.mean([m["eval/passkey_retrieval"] for m in evaluations(run)]))


def needle_by_length(run):
    return {b["length"]: b["accuracy"] for b in run["needle"]["by_length"]}


def mean_std(values):
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return float("nan"), float("nan")
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else 0.0


def paired(variant_runs, vanilla_runs, metric):
    """Mean paired difference (variant - vanilla) over the seeds both have, and its 95% CI."""
    seeds = sorted(set(variant_runs) & set(vanilla_runs))
    diffs = np.array([metric(variant_runs[s]) - metric(vanilla_runs[s]) for s in seeds])
    if len(diffs) < 2:
        return float("nan"), float("nan"), len(diffs)
    half = T975[min(len(diffs) - 1, len(T975)) - 1] * diffs.std(ddof=1) / math.sqrt(len(diffs))
    return float(diffs.mean()), float(half), len(diffs)


def pct(x):
    return "n/a" if math.isnan(x) else f"{100 * x:.1f}"


def task_table(task, by_variant):
    vanilla = by_variant.get("vanilla", {})
    lengths = sorted(needle_by_length(next(iter(next(iter(by_variant.values())).values()))))
    metrics = [("held-out retrieval %", lambda r: final_eval(r)["eval/passkey_retrieval"]),
               ("retrieval over the run %", curve_mean),
               ("token accuracy %", lambda r: final_eval(r)["eval/token_accuracy"])]
    metrics += [(f"needle @{n} %", lambda r, n=n: needle_by_length(r)[n]) for n in lengths]
    lines = [f"### {task}", ""]
    header = "| variant | seeds | " + " | ".join(name for name, _ in metrics)
    header += " | held-out loss | train s/run |"
    lines += [header, "|" + "---|" * (len(metrics) + 4)]
    for variant in [v for v in VARIANTS if v in by_variant]:
        runs = by_variant[variant]
        cells = []
        for _, metric in metrics:
            m, s = mean_std([metric(r) for r in runs.values()])
            cell = f"{pct(m)} +- {pct(s)}"
            if variant != "vanilla" and vanilla:
                d, half, n = paired(runs, vanilla, metric)
                cell += f" ({'+' if d >= 0 else ''}{pct(d)} [{pct(d - half)}, {pct(d + half)}])"
            cells.append(cell)
        loss_m, loss_s = mean_std([final_eval(r)["eval/loss"] for r in runs.values()])
        wall_m, _ = mean_std([r["train_seconds"] for r in runs.values()])
        lines.append(f"| {variant} | {len(runs)} | " + " | ".join(cells) +
                     f" | {loss_m:.3f} +- {loss_s:.3f} | {wall_m:.0f} |")
    lines.append("")
    lines.append("Each cell: mean +- std over seeds; for a variant, in parentheses its paired "
                 "difference to vanilla over the same seeds and the 95% t interval, in points.")
    lines.append("")
    return lines


def summary_table(task, by_variant):
    """The compact table of RESULTS.md: held-out retrieval, its paired difference to vanilla and
    the needle grid at the trained length and beyond."""
    vanilla = by_variant.get("vanilla", {})
    lengths = sorted(needle_by_length(next(iter(next(iter(by_variant.values())).values()))))
    retrieval = lambda r: final_eval(r)["eval/passkey_retrieval"]  # noqa: E731
    beyond = lambda r: float(np.mean([needle_by_length(r)[n] for n in lengths[1:]]))  # noqa: E731
    lines = [f"**{task}** ({lengths[0]} tokens; the needle beyond: {', '.join(map(str, lengths[1:]))})",
             "", "| variant | seeds | held-out retrieval % | vs vanilla | retrieval over the run, vs "
             "vanilla | needle @trained % | needle beyond % |", "|---|---|---|---|---|---|---|"]
    for variant in [v for v in VARIANTS if v in by_variant]:
        runs = by_variant[variant]
        row = [variant, str(len(runs))]
        m, sd = mean_std([retrieval(r) for r in runs.values()])
        row.append(f"{pct(m)} +- {pct(sd)}")
        for metric in (retrieval, curve_mean):
            if variant == "vanilla":
                row.append("")
                continue
            d, half, _ = paired(runs, vanilla, metric)
            row.append(f"{'+' if d >= 0 else ''}{pct(d)} [{pct(d - half)}, {pct(d + half)}]")
        for metric in (lambda r: needle_by_length(r)[lengths[0]], beyond):
            m, sd = mean_std([metric(r) for r in runs.values()])
            row.append(f"{pct(m)} +- {pct(sd)}")
        lines.append("| " + " | ".join(row) + " |")
    return lines + [""]


def fill_results(path, summary):
    """Replaces what lies between the summary markers of `path` (RESULTS.md) with `summary`."""
    begin, end = "<!-- summary:begin (tools/ssa_study_report.py) -->", "<!-- summary:end -->"
    with open(path) as f:
        text = f.read()
    if begin not in text or end not in text:
        raise SystemExit(f"{path} has no {begin} ... {end} markers")
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    with open(path, "w") as f:
        f.write(head + begin + "\n" + "\n".join(summary) + "\n" + end + tail)


def temperature_lines(task, by_variant):
    lines = [f"#### {task}: temperatures at the trained length (needle prompts)", "",
             "| variant | layer | tau^q mean | tau^q near a bound % | tau^v mean | "
             "tau^v near a bound % | on the clamp % | sigma(alpha) max |",
             "|---|---|---|---|---|---|---|---|"]
    for variant in [v for v in VARIANTS if v in by_variant and v != "vanilla"]:
        runs = [r for r in by_variant[variant].values() if "temperatures" in r["needle"]]
        if not runs:
            continue
        for layer in range(len(runs[0]["needle"]["temperatures"])):
            row = [variant + f" ({len(runs)} seeds)", str(layer)]
            clamp = []
            for kind in ("query", "value"):
                hs = [r["needle"]["temperatures"][layer][kind] for r in runs]
                if sum(h["count"] for h in hs) == 0:
                    row += ["off", "off"]
                    continue
                count = sum(h["count"] for h in hs)
                row.append(f"{sum(h['mean'] * h['count'] for h in hs) / count:.3f}")
                row.append(pct(sum(h["near_lower"] + h["near_upper"] for h in hs) / count))
                clamp.append(sum(h["at_clamp"] for h in hs) / count)
            row.append(pct(max(clamp)) if clamp else "n/a")
            sig = [x for r in runs for x in r["needle"]["temperatures"][layer]["sigma_alpha"]]
            row.append(f"{max(sig):.2e}" if sig else "n/a (no tau^q)")
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Near a bound: |tanh z| >= 0.95, i.e. the temperature within 5% of the "
              "range's width of sigma(alpha) ln n or 2 + sigma(alpha) ln n.", ""]
    return lines


def variant_curves(by_variant, xs_of, ys_of):
    """(label, xs, mean, std or None) per variant: ys_of(run) over the x values of its first run."""
    for variant in [v for v in VARIANTS if v in by_variant]:
        runs = list(by_variant[variant].values())
        xs = xs_of(runs[0])
        values = 100 * np.array([ys_of(r, xs) for r in runs])
        std = values.std(axis=0, ddof=1) if len(runs) > 1 else None
        yield f"{variant} ({len(runs)})", xs, values.mean(axis=0), std


def save(fig, ax, path):
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_steps(task, by_variant, out):
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, steps, mean, std in variant_curves(
            by_variant, lambda r: [m["step"] for m in evaluations(r)],
            lambda r, _: [m["eval/passkey_retrieval"] for m in evaluations(r)]):
        ax.plot(steps, mean, label=label)
        if std is not None:
            ax.fill_between(steps, np.maximum(mean - std, 0), np.minimum(mean + std, 100), alpha=0.15)
    ax.set(xlabel="step", ylabel="held-out retrieval % (teacher-forced)",
           title=f"{task}: retrieval vs steps (mean, band +- std)")
    save(fig, ax, os.path.join(out, f"retrieval_vs_steps_{task}.png"))


def plot_lengths(task, by_variant, out):
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, lengths, mean, std in variant_curves(
            by_variant, lambda r: sorted(needle_by_length(r)),
            lambda r, lengths: [needle_by_length(r)[n] for n in lengths]):
        ax.errorbar(lengths, mean, yerr=std, marker="o", capsize=3, label=label)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="evaluation length (tokens)", ylabel="needle retrieval % (generated)",
           title=f"{task}: retrieval vs evaluation length")
    save(fig, ax, os.path.join(out, f"retrieval_vs_length_{task}.png"))


def plot_temperatures(task, by_variant, out):
    runs = [r for r in by_variant.get("ssa", {}).values() if "temperatures" in r["needle"]]
    if not runs:
        return False
    layers = len(runs[0]["needle"]["temperatures"])
    fig, axes = plt.subplots(2, layers, figsize=(3 * layers, 5), sharex=True)
    for layer in range(layers):
        for row, kind in enumerate(("query", "value")):
            hs = [r["needle"]["temperatures"][layer][kind] for r in runs]
            counts = np.sum([h["counts"] for h in hs], axis=0)
            edges = hs[0]["bin_low"] + hs[0]["bin_width"] * np.arange(len(counts) + 1)
            ax = axes[row][layer]
            ax.stairs(counts / max(counts.sum(), 1), edges, fill=True)
            ax.set_title(f"layer {layer}: tau^{'q' if kind == 'query' else 'v'}", fontsize=9)
    fig.suptitle(f"{task}: full SSA temperatures ({len(runs)} seeds, needle prompts)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"temperatures_{task}.png"), dpi=70)
    plt.close(fig)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--out", required=True)
    parser.add_argument("--results-md", help="RESULTS.md whose summary markers get the tables")
    args = parser.parse_args()
    runs = load(args.results)
    lines = ["# SSA study tables (generated by tools/ssa_study_report.py)", ""]
    summary = []
    for task in sorted(runs, key=lambda t: (len(t), t)):
        summary += summary_table(task, runs[task])
        lines += task_table(task, runs[task])
        lines += temperature_lines(task, runs[task])
        plot_steps(task, runs[task], args.out)
        plot_lengths(task, runs[task], args.out)
        plot_temperatures(task, runs[task], args.out)
    with open(os.path.join(args.out, "tables.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    if args.results_md:
        fill_results(args.results_md, summary)
    print(f"wrote {args.out}/tables.md and the plots of {', '.join(sorted(runs))}")


if __name__ == "__main__":
    main()
