#!/usr/bin/env python3
"""The loss by position in the window of `kelvin eval ... --by-position B --json FILE` results.

One curve per JSON file (a model before and after a long-context extension, say): each bucket's
loss drawn flat over its positions [begin, end); buckets without targets leave a gap. The bucket
boundaries and target counts are in the JSON. --log-positions puts the positions on a log axis
(for bucket starts that grow geometrically):

  python3 tools/plot_loss_by_position.py before.json after.json loss.png [--title T] [--log-positions]

Needs matplotlib (tools/requirements.txt).
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        score = json.load(f)
    if "by_position" not in score:
        raise SystemExit(f"{path}: no \"by_position\" buckets; score with --by-position B --json")
    return score


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scores", nargs="+", help="JSON files of kelvin eval --by-position")
    parser.add_argument("out", help="the PNG to write")
    parser.add_argument("--title", default=None)
    parser.add_argument("--log-positions", action="store_true")
    args = parser.parse_args()
    scores = [load(path) for path in args.scores]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for path, score in zip(args.scores, scores):
        xs, ys = [], []
        for bucket in score["by_position"]:
            scored = bucket["targets"] > 0  # else a gap in the curve
            xs += [bucket["begin"], bucket["end"]]
            ys += [bucket["loss"], bucket["loss"]] if scored else [float("nan")] * 2
        label = f"{score['model']} ({os.path.basename(path)})" if len(scores) > 1 else score["model"]
        ax.plot(xs, ys, label=label)
    if args.log_positions:
        ax.set_xscale("symlog", linthresh=max(1, scores[0]["by_position"][0]["end"]))
    ax.set(xlabel="position p in the window (p + 1 tokens seen)", ylabel="loss (nats per token)")
    first = scores[0]
    ax.set_title(args.title or f"loss by position: {os.path.basename(first['data'])}, windows of "
                 f"{first['seq_length']} (stride {first['stride']})", fontsize=9)
    if len(scores) > 1:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=80)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
