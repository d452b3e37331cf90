#!/usr/bin/env python3
"""The needle-in-a-haystack heatmap of a `kelvin eval ... --needle --json FILE` result.

Rows are context lengths, columns key depths, each cell the retrieval percentage by generation
(green 100%, red 0%), the number printed in it:

  python3 tools/plot_needle.py grid.json --out needle.png [--title TEXT]

Needs numpy and matplotlib (tools/requirements.txt).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid")
    parser.add_argument("--out", required=True)
    parser.add_argument("--title", default=None)
    args = parser.parse_args()
    with open(args.grid) as f:
        grid = json.load(f)
    lengths, depths = grid["lengths"], grid["depths"]
    accuracy = np.zeros((len(lengths), len(depths)))
    for cell in grid["cells"]:
        accuracy[lengths.index(cell["length"]), depths.index(cell["depth"])] = cell["accuracy"]
    fig, ax = plt.subplots(figsize=(1 + 0.6 * len(depths), 1 + 0.45 * len(lengths)))
    ax.imshow(100 * accuracy, cmap="RdYlGn", vmin=0, vmax=100, aspect="auto")
    for i in range(len(lengths)):
        for j in range(len(depths)):
            ax.text(j, i, f"{100 * accuracy[i, j]:.0f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(depths)), [f"{100 * d:.0f}%" for d in depths])
    ax.set_yticks(range(len(lengths)), [str(n) for n in lengths])
    ax.set(xlabel="needle depth (fraction of the filler)", ylabel="context length (tokens)")
    decoys = f", {grid['distractors']} decoys" if grid.get("distractors") else ""
    task = grid.get("task", "passkey")  # grids written before --task were passkey grids
    ax.set_title(args.title or f"{grid['model']}, {task}: retrieval % by generation, "
                 f"{grid['samples_per_cell']} samples per cell{decoys}", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=80)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
