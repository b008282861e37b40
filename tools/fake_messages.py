"""Do the C++ checks and the Python fakes fail a bad call with the same message? CPU only, no GPU.

    python tools/fake_messages.py

Runs every bad call of tests/test_fake_messages.py's battery on CPU tensors, which the C++ checks validate, and on
meta tensors, which the fakes validate, prints each pair of messages that differ with the words that differ, then
how many differ and a coarse class of each difference.
"""
import collections
import difflib
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from test_fake_messages import battery, message  # noqa: E402


def how_they_differ(real: str, fake: str) -> str:
    """The differing words, C++ first, e.g. "[3, 5] -> (3, 5)" or "Float -> torch.float32"."""
    a, b = real.split(" "), fake.split(" ")
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return "; ".join(f"{' '.join(a[i:j])} -> {' '.join(b[k:m])}"
                     for tag, i, j, k, m in matcher.get_opcodes() if tag != "equal")


def kind(real: str, fake: str) -> str:
    """A coarse class of a difference, for the summary: what the fake's message spells the Python way."""
    kinds = []
    if re.search(r"torch\.Size\(|\(\d+(, \d+)*,?\)|\(\)", fake) and re.search(r"\[[\d, ]*\]", real):
        kinds.append("sizes")
    if re.search(r"torch\.(float|bfloat|complex|int|uint|bool)", fake):
        kinds.append("dtype")
    if re.search(r"torch\.sparse", fake):
        kinds.append("layout")
    if real.split(":")[0] != fake.split(":")[0]:
        kinds.append("exception class")
    return " + ".join(kinds) or "other (wording, number format)"


def main() -> int:
    calls = battery()
    differing = collections.Counter()
    for call in calls:
        real, fake = message(call, "cpu"), message(call, "meta")
        if real != fake:
            differing[kind(real, fake)] += 1
            real, fake = real.splitlines()[0], fake.splitlines()[0]  # less the C++ backtrace of a TypeError
            print(f"{call.op} [{call.id}]\n    C++:  {real}\n    meta: {fake}\n    diff: {how_they_differ(real, fake)}")
    print(f"\n{sum(differing.values())} of {len(calls)} bad calls fail with different messages on CPU and meta")
    for what, n in differing.most_common():
        print(f"  {n:4d}  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
