"""The benchmark summary figure, drawn from the recorded numbers in benchmarks/results/summary.json.

One bar per comparison: esjax's rate over the peer's on the same work (env steps per second, in
one process), grouped by device, on a log scale with 1x marked. Nothing is measured here: the
numbers are those the benchmark pages (docs/benchmarks/) record, each with its script; rerun a
script, update its entry, and redraw. ::

    python benchmarks/summary_figure.py     # docs/benchmarks/summary.png, and the table of
                                            # docs/benchmarks/index.md between its markers
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "benchmarks" / "results" / "summary.json"
FIGURE = REPO / "docs" / "benchmarks" / "summary.png"
PAGE = REPO / "docs" / "benchmarks" / "index.md"
# The page's table lies between these two lines (tests/test_guides.py checks it is this table).
BEGIN = "<!-- the comparisons: benchmarks/summary_figure.py -->"
END = "<!-- end of the comparisons -->"
COLOURS = {"2-core CPU": "#3b6ea8", "one GPU (H100-class)": "#c0504d"}


def comparisons(path: Path = DATA) -> list[dict]:
    """The recorded comparisons, each with its ratio (esjax's rate over the peer's)."""
    rows = json.loads(path.read_text())["comparisons"]
    for row in rows:
        row["ratio"] = row["esjax"] / row["peer_rate"]
    return rows


def draw(rows: list[dict], out: Path = FIGURE) -> Path:
    rows = sorted(rows, key=lambda r: (list(COLOURS).index(r["device"]), -r["ratio"]))
    fig, ax = plt.subplots(figsize=(10, 0.5 * len(rows) + 1.3), dpi=110)
    positions = list(range(len(rows)))[::-1]
    for y, row in zip(positions, rows, strict=True):
        ax.barh(y, row["ratio"], color=COLOURS[row["device"]], height=0.62)
        ax.text(row["ratio"] * 1.04, y, f"{row['ratio']:.2f}x", va="center", fontsize=9)
    ax.set_yticks(positions, [f"{r['peer']}\n{r['work']}" for r in rows], fontsize=7.5)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlim(0.8, max(r["ratio"] for r in rows) * 1.5)
    ticks = [t for t in (1, 1.5, 2, 3, 4, 6, 8, 12, 16) if t <= ax.get_xlim()[1]]
    ax.set_xticks(ticks, [f"{t:g}x" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("esjax's env steps per second over the peer's (same work, same process)")
    for device, colour in COLOURS.items():
        ax.bar(0, 0, color=colour, label=device)
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    ax.set_title("esjax against what you would otherwise run", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def table(rows: list[dict]) -> str:
    lines = ["| peer | the same work | device | esjax | peer | esjax / peer | page |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['peer']} | {r['work']} | {r['device']} | {r['esjax'] / 1e6:.3g} M "
                     f"| {r['peer_rate'] / 1e6:.3g} M | **{r['ratio']:.2f}x** | "
                     f"[{r['page'].removesuffix('.md')}]({r['page']}) |")  # fmt: skip
    return "\n".join(lines)


def write_table(rows: list[dict], page: Path = PAGE) -> Path:
    """The page with its table between :data:`BEGIN` and :data:`END` made anew."""
    text = page.read_text()
    before, rest = text.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    page.write_text(f"{before}{BEGIN}\n{table(rows)}\n{END}{after}")
    return page


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    rows = comparisons()
    for written in (draw(rows), write_table(rows)):
        print(f"wrote {written.relative_to(REPO)}")


if __name__ == "__main__":
    main()
