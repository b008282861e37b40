"""Instruction budget of the row-streaming depthwise kernel (depthwise_conv2d_rows.cuh) from its SASS, without a GPU.

Builds a cubin for sm_90a with tools/nvcc_check.py's flags, disassembles it with nvdisasm and, for every
depthwise_rows_kernel instantiation, prints registers, spills and the instructions of its main loop by opcode class,
in total and per output element (a loop iteration is kUnroll steps of VEC outputs a lane).

The main loop is the innermost back-edge loop holding a whole group's FFMAs (KH * KW * VEC * kUnroll). Its rows:
`static`, every instruction of the body; `hot`, the path a warp issues in the steady state: through the body's
branches, the one with the most FFMAs and widest stores, and of those the shortest. Where the kernel runs
untested inner groups in a loop of their own (the variant of commit d910ccf), an `outer` loop holds the tested
steps (the bands' first and last groups, odd shapes); its `checked` row is the longest such path, the inner loop's
body left out. Predicated-off instructions count: they take an issue slot all the same. BRA.DIV fallbacks
(divergent shuffles) are not taken.

    python tools/probe/sass_rows.py                  # the real translation unit (depthwise_conv2d_kernel.cu)
    python tools/probe/sass_rows.py --quick          # only the rows kernels, P0 = (KW - 1) / 2 (seconds, not minutes)
    python tools/probe/sass_rows.py --quick --sizes 3 --header-dir /tmp/old   # /tmp/old/cuda/depthwise_conv2d_rows.cuh
    python tools/probe/sass_rows.py --quick --dump BFloat16,3,3      # also print the hot path's SASS
    python tools/probe/sass_rows.py --bulk --sizes 3                 # the bulk-copy kernels instead
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

from torch.utils import cpp_extension

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "convops", "csrc", "cuda", "depthwise_conv2d_kernel.cu")

# The --quick translation unit: the instantiations launch_depthwise_rows makes for padded convolutions.
QUICK_TU = """#include "cuda/depthwise_conv2d_rows.cuh"
namespace convops::cuda::depthwise::rows {{
#define CONVOPS_ROWS(T, K) template __global__ void depthwise_rows_kernel<T, K, K, (K - 1) / 2, \\
    RowsConfig<T, K, K>::kVec, RowsConfig<T, K, K>::kDepth, RowsConfig<T, K, K>::kMinBlocks>(const RowsParams<T>);
{instantiations}
}}
"""

# --bulk: the bulk-copy kernel's instantiations (depthwise_conv2d_bulk.cuh), unpadded and padded, as its launch makes them.
BULK_TU = """#include "cuda/depthwise_conv2d_bulk.cuh"
namespace convops::cuda::depthwise::bulk_rows {{
#define CONVOPS_BULK(T, K, P0) template __global__ void depthwise_bulk_kernel<T, K, K, P0, \\
    BulkConfig<T, K, K>::kVec, BulkConfig<T, K, K>::kMinBlocks>(const BulkParams<T>);
{instantiations}
}}
"""

CLASSES = ["FFMA", "SHFL", "LDG", "STG", "CVT", "BIT", "INT", "MOV", "CTRL", "OTHER"]


def find_nvdisasm() -> str:
    candidates = ["/tmp/rows/pkg/nvidia/cu13/bin/nvdisasm", shutil.which("nvdisasm") or ""]
    candidates += sorted(os.path.join("/usr/local", e, "bin", "nvdisasm") for e in os.listdir("/usr/local")
                         if e.startswith("cuda"))
    for c in candidates:
        if c and os.path.exists(c):
            return c
    sys.exit("nvdisasm not found (pip install nvidia-cuda-nvdisasm, or a CUDA toolkit under /usr/local/cuda*)")


def build_cubin(source: str, header_dir: str | None, out: str) -> str:
    """Compiles source to out (sm_90a cubin) with tools/nvcc_check.py's flags; returns ptxas's -v report."""
    includes = cpp_extension.include_paths() + [os.path.join(ROOT, "convops", "csrc"), sysconfig.get_paths()["include"],
                                                  os.path.join(ROOT, "tools", "nvcc_shim")]
    if header_dir:
        includes.insert(0, header_dir)
    cmd = ["nvcc", "-cubin", source, "-o", out, "-std=c++20", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr",
           "-DCONVOPS_WITH_CUDA", "-Xptxas=-warn-spills", "-Xptxas=-v", "-gencode=arch=compute_90a,code=sm_90a"]
    cmd += [f"-I{p}" for p in includes] + cpp_extension.COMMON_NVCC_FLAGS
    cmd += ["-DTORCH_EXTENSION_NAME=_C", "-D_GLIBCXX_USE_CXX11_ABI=1"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(res.stdout + res.stderr)
    return res.stdout + res.stderr


def ptxas_resources(report: str) -> dict:
    """mangled name -> {'regs': int, 'spill_st': int, 'spill_ld': int, 'stack': int}."""
    out, name = {}, None
    for line in report.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            name = m.group(1)
            out.setdefault(name, {"regs": 0, "spill_st": 0, "spill_ld": 0, "stack": 0})
            continue
        if name is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out[name].update(stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[name]["regs"] = int(m.group(1))
    return out


def demangle(names):
    res = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return dict(zip(names, res.stdout.splitlines()))


Instr = collections.namedtuple("Instr", "addr pred opcode operands text")


def disassemble(cubin: str) -> dict:
    """mangled function name -> (instructions, {label: index of the instruction it precedes})."""
    text = subprocess.run([find_nvdisasm(), "-c", cubin], capture_output=True, text=True, check=True).stdout
    funcs, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            cur = funcs.setdefault(m.group(1), ([], {}))
            continue
        if cur is None:
            continue
        m = re.match(r"^(\.L_x_\d+):", line.strip())
        if m:
            cur[1][m.group(1)] = len(cur[0])
            continue
        m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z0-9_.]+)\s*(.*?)\s*;", line)
        if m:
            pred = (m.group(2) or "").strip()
            cur[0].append(Instr(int(m.group(1), 16), pred, m.group(3), m.group(4), line.split(";")[0].strip()))
    return funcs


def classify(ins: Instr) -> str:
    op, base = ins.opcode, ins.opcode.split(".")[0]
    if base == "FFMA":
        return "FFMA"
    if base == "SHFL":
        return "SHFL"
    if base in ("LDG", "LD"):
        return "LDG"
    if base in ("STG", "ST"):
        return "STG"
    if base in ("F2F", "F2FP", "I2F", "F2I") or op.startswith("HADD2.F32"):
        return "CVT"
    if base in ("SHF", "LOP3", "PRMT", "BFE", "BFI") or op in ("IMAD.U32", "IMAD.SHL", "IMAD.SHL.U32"):
        return "BIT"
    if base in ("MOV", "CS2R", "UMOV") or op.startswith("IMAD.MOV") or (base == "HFMA2" and "-RZ, RZ" in ins.operands):
        return "MOV"
    if base in ("IMAD", "IADD3", "VIADD", "LEA", "SEL", "ISETP", "IABS", "IMNMX", "VIMNMX", "FSEL", "FSETP"):
        return "INT"
    if base in ("BRA", "BSSY", "BSYNC", "WARPSYNC", "NOP", "P2R", "R2P", "PLOP3", "EXIT", "BAR"):
        return "CTRL"
    return "OTHER"


def branch_target(ins: Instr):
    m = re.search(r"`\((\.L_x_\d+)\)", ins.operands)
    return m.group(1) if ins.opcode.startswith("BRA") and m else None


def ffma_loops(instrs, labels, min_ffma):
    """(first, last) indices of the loops holding at least min_ffma FFMAs, innermost first. A loop is a head label
    and the last backward branch to it (the compiler may branch back to a head from several places)."""
    last_branch = {}
    for i, ins in enumerate(instrs):
        target = branch_target(ins)
        if target is not None and labels[target] <= i:
            last_branch[labels[target]] = i
    loops = [(lo, hi) for lo, hi in last_branch.items()
             if sum(1 for x in instrs[lo:hi + 1] if x.opcode.startswith("FFMA")) >= min_ffma]
    return sorted(loops, key=lambda r: r[1] - r[0])


def store_width(ins: Instr) -> int:
    m = re.search(r"\.(U8|S8|U16|S16|64|128)\b", ins.opcode)
    return {"U8": 8, "S8": 8, "U16": 16, "S16": 16, "64": 64, "128": 128}[m.group(1)] if m else 32


def hot_path(instrs, labels, lo, hi, longest=False, exclude=(0, -1)):
    """Indices of the instructions on the steady-state path from the loop head lo to its back-edge hi.

    The loop body is a DAG of basic blocks (everything inside is unrolled); the path taken is the one with the most
    FFMAs and widest stores (not the edge and misaligned cases' narrower ones); of those, the shortest (the
    kernel's untested inner steps), or with longest=True the longest (its steps that test every condition).
    Blocks in the index range `exclude` (an inner loop) are not entered.
    Branches leaving the body (BRA.DIV's divergent fallbacks) are not taken."""
    widest = max((store_width(x) for x in instrs[lo:hi + 1] if x.opcode.startswith("STG")), default=0)
    starts = {lo}
    for i in range(lo, hi + 1):
        t = branch_target(instrs[i])
        if t is not None:
            starts.add(i + 1)
            if lo <= labels[t] <= hi:
                starts.add(labels[t])
    for idx in labels.values():
        if lo <= idx <= hi:
            starts.add(idx)
    starts = sorted(s for s in starts if s <= hi)
    blocks = {s: (s, (starts[k + 1] - 1) if k + 1 < len(starts) else hi) for k, s in enumerate(starts)}

    def weight(s):
        a, b = blocks[s]
        w = 0
        for x in instrs[a:b + 1]:
            if x.opcode.startswith("FFMA"):
                w += 10**6
            elif x.opcode.startswith("STG"):
                w += 10**6 if store_width(x) == widest else 0
            w += 1 if longest else -1
        return w

    def successors(s):
        a, b = blocks[s]
        last = instrs[b]
        t = branch_target(last)
        succ = []
        if t is None or last.pred or last.opcode.startswith("BRA.DIV") or "!P" in last.operands.split("`")[0]:
            if b + 1 <= hi:
                succ.append(b + 1)
        if t is not None and not last.opcode.startswith("BRA.DIV") and lo < labels[t] <= hi:
            succ.append(labels[t])
        succ = [n for n in succ if not exclude[0] <= n <= exclude[1]]
        if last.opcode == "EXIT" and not last.pred:
            succ = []
        return succ

    memo = {}

    def best(s):  # (score, path) from block s to the back-edge
        if s in memo:
            return memo[s]
        a, b = blocks[s]
        succ = [best(n) for n in successors(s) if n > s] if b < hi else []
        tail = max(succ, key=lambda r: r[0]) if succ else (0, [])
        if b < hi and not succ:
            tail = (-10**12, [])
        memo[s] = (weight(s) + tail[0], list(range(a, b + 1)) + tail[1])
        return memo[s]

    sys.setrecursionlimit(10000)
    return best(lo)[1]


def kernel_params(demangled: str):
    m = re.search(r"depthwise_rows_kernel<([^,]+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+)>", demangled)
    if m:
        dtype = m.group(1).split("::")[-1]
        kh, kw, p0, vec, depth, min_blocks = map(int, m.groups()[1:])
        unroll = kh if kh % depth == 0 else kh * depth
        return dict(dtype=dtype, kh=kh, kw=kw, p0=p0, vec=vec, depth=depth, min_blocks=min_blocks, unroll=unroll)
    # The bulk-copy kernel walks its band in groups of KH steps (convolve_band's kUnroll = KH); its rows wait in
    # shared memory, so there is no register depth.
    m = re.search(r"depthwise_bulk_kernel<([^,]+), (\d+), (\d+), (\d+), (\d+), (\d+)>", demangled)
    if m:
        dtype = m.group(1).split("::")[-1]
        kh, kw, p0, vec, min_blocks = map(int, m.groups()[1:])
        return dict(dtype=dtype, kh=kh, kw=kw, p0=p0, vec=vec, depth="ring", min_blocks=min_blocks, unroll=kh)
    return None


def count(instrs, indices):
    c = collections.Counter(classify(instrs[i]) for i in indices)
    return c, sum(c.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default=SOURCE, help="translation unit to build (default: the depthwise op)")
    parser.add_argument("--quick", action="store_true", help="build only the rows kernels (P0 = (KW - 1) / 2)")
    parser.add_argument("--bulk", action="store_true", help="build only the bulk-copy kernels (P0 = 0 and "
                                                            "(KW - 1) / 2; 16-bit 7x7 is not one)")
    parser.add_argument("--sizes", default="3,5,7", help="--quick: filter sizes to instantiate (default 3,5,7)")
    parser.add_argument("--header-dir", help="a directory whose cuda/depthwise_conv2d_rows.cuh replaces ours")
    parser.add_argument("--cubin", help="analyse this cubin instead of building (no register report)")
    parser.add_argument("--keep", help="also write the cubin here")
    parser.add_argument("--dump", help="print the hot path of kernels whose template arguments contain this "
                                       "(comma-separated, no spaces, e.g. BFloat16,3,3)")
    parser.add_argument("--dump-checked", action="store_true", help="--dump the checked path instead")
    parser.add_argument("--opcodes", action="store_true", help="also list the hot path's opcodes")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        resources = {}
        if args.cubin:
            cubin = args.cubin
        else:
            source = args.source
            if args.bulk:
                source = os.path.join(tmp, "bulk_only.cu")
                with open(source, "w") as f:
                    f.write(BULK_TU.format(instantiations="\n".join(
                        f"CONVOPS_BULK({t}, {k}, {p0})" for k in map(int, args.sizes.split(","))
                        for p0 in (0, (k - 1) // 2) for t in ("float", "at::BFloat16", "at::Half")
                        if t == "float" or k < 7)))
            elif args.quick:
                source = os.path.join(tmp, "rows_only.cu")
                with open(source, "w") as f:
                    f.write(QUICK_TU.format(instantiations="\n".join(
                        f"CONVOPS_ROWS({t}, {k})" for k in args.sizes.split(",") for t in ("float", "at::BFloat16",
                                                                                          "at::Half"))))
            cubin = os.path.join(tmp, "out.cubin")
            resources = ptxas_resources(build_cubin(source, args.header_dir, cubin))
            if args.keep:
                shutil.copy(cubin, args.keep)
        funcs = disassemble(cubin)

    names = demangle([n for n in funcs if "depthwise_rows_kernel" in n or "depthwise_bulk_kernel" in n])
    order = {"BFloat16": 0, "float": 1, "Half": 2}
    kernels = []
    for mangled, demangled in names.items():
        kp = kernel_params(demangled)
        if kp:
            kernels.append((kp["kh"], -kp["p0"], order.get(kp["dtype"], 9), mangled, kp))
    kernels.sort()
    for _, _, _, mangled, kp in kernels:
        instrs, labels = funcs[mangled]
        res = resources.get(mangled, {})
        outputs = kp["unroll"] * kp["vec"]
        print(f"== {kp['dtype']} {kp['kh']}x{kp['kw']} P0={kp['p0']} VEC={kp['vec']} depth={kp['depth']} "
              f"minBlocks={kp['min_blocks']}: regs {res.get('regs', '?')}, spill st/ld "
              f"{res.get('spill_st', '?')}/{res.get('spill_ld', '?')} B, stack {res.get('stack', '?')} B, "
              f"{len(instrs)} instructions")
        loops = ffma_loops(instrs, labels, kp["kh"] * kp["kw"] * outputs)
        if not loops:
            print("   no main loop found")
            continue
        # Where the kernel runs its inner groups in a loop of their own, the innermost loop is the main loop and
        # the outermost one, which contains it, also holds the tested steps. Loops that overlap without nesting are
        # one loop laid out rotated: the outermost, from the loop's entry, is the main loop.
        outer = loops[-1]
        nested = len(loops) > 1 and outer[0] <= loops[0][0] and loops[0][1] <= outer[1]
        loops = [loops[0], outer] if nested else [outer]
        main_range = loops[0]
        for n_loop, (lo, hi) in enumerate(loops):
            exclude = main_range if n_loop else (0, -1)
            hot = hot_path(instrs, labels, lo, hi)
            checked = hot_path(instrs, labels, lo, hi, longest=True, exclude=exclude)
            spills = sum(1 for x in instrs[lo:hi + 1] if x.opcode.split(".")[0] in ("STL", "LDL"))
            print(f"   {'main' if n_loop == 0 else 'outer'} loop {instrs[lo].addr:#06x}..{instrs[hi].addr:#06x}: "
                  f"{kp['unroll']} steps x {kp['vec']} outputs a lane = {outputs} outputs per iteration; "
                  f"{spills} local loads/stores in its body")
            print("   " + " " * 14 + "".join(f"{c:>7}" for c in CLASSES) + "  total")
            table = [("static", range(lo, hi + 1)), ("hot", hot), ("checked", checked)]
            # With an outer loop, the main loop is the untested one (hot); the outer one has the tested steps.
            for label, idx in table[:2] if n_loop == 0 and len(loops) > 1 else table if n_loop == 0 else table[2:]:
                c, total = count(instrs, idx)
                print(f"   {label:<7} count" + "".join(f"{c[k]:>7}" for k in CLASSES) + f"{total:>7}")
                print(f"   {label:<7} /out " + "".join(f"{c[k] / outputs:>7.2f}" for k in CLASSES) +
                      f"{total / outputs:>7.2f}")
            if n_loop == 0:
                main_hot, main_checked = hot, checked
            else:
                main_checked = checked
        hot, checked = main_hot, main_checked
        if args.opcodes:
            ops = collections.Counter(instrs[i].opcode for i in hot)
            print("   hot opcodes: " + ", ".join(f"{k} {v}" for k, v in ops.most_common()))
        if args.dump:
            want = args.dump.split(",")
            have = [kp["dtype"], str(kp["kh"]), str(kp["kw"])]
            if want == have[:len(want)]:
                for i in (checked if args.dump_checked else hot):
                    print(f"      [{classify(instrs[i]):>5}] {instrs[i].text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
