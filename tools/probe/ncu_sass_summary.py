"""Per-opcode totals of an ncu source-level (SASS) export: executed warp instructions and stall samples.

    ncu --section SourceCounters --kernel-name regex:NAME -c 1 -o prof python3 script.py
    ncu -i prof.ncu-rep --page source --csv --print-source sass > prof.csv
    python3 tools/probe/ncu_sass_summary.py prof.csv [--top 25]

Says where a kernel's instructions and stalls go (HMMA vs shared loads vs address arithmetic) without reading the
whole listing.
"""
import argparse
import collections
import csv
import re


def number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with open(args.csv, newline="") as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if "Source" in line and "Address" in line)
    rows = list(csv.DictReader(lines[start:]))
    columns = rows[0].keys()
    executed = next(c for c in columns if c.startswith("Warp Instructions Executed") or c == "Instructions Executed")
    stalls = next((c for c in columns if c.startswith("Warp Stall Sampling (All")), None)
    per_op = collections.defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        source = re.sub(r"^@!?U?P\w+\s+", "", row["Source"].strip())
        op = source.split(" ")[0] if source else "?"
        per_op[op][0] += number(row[executed])
        per_op[op][1] += number(row[stalls]) if stalls else 0.0
    total_exec = sum(v[0] for v in per_op.values()) or 1.0
    total_stall = sum(v[1] for v in per_op.values()) or 1.0
    print(f"{'opcode':28s} {'executed':>14s} {'share':>7s} {'stall samples':>14s} {'share':>7s}")
    for op, (ex, st) in sorted(per_op.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"{op:28s} {ex:14.0f} {ex / total_exec:7.1%} {st:14.0f} {st / total_stall:7.1%}")
    print(f"{'total':28s} {total_exec:14.0f} {'':7s} {total_stall:14.0f}")


if __name__ == "__main__":
    main()
