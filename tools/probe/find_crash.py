"""Replays the CPU fuzz seeds of one op, printing each seed before it runs, so a crash names its configuration;
then runs that configuration through eager PyTorch in a subprocess (with and without oneDNN) to see whose crash it is.
    python tools/probe/find_crash.py depthwise_conv2d"""
import subprocess
import sys

sys.path.insert(0, "tests")
import torch  # noqa: E402

if len(sys.argv) > 2:  # child: eager F.conv2d on the config of one seed
    import fuzz_configs  # noqa: F401
    import test_fuzz
    op_name, seed, mkldnn = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    config = test_fuzz.draw(op_name, seed, "cpu")
    print(config, flush=True)
    torch.default_generator.manual_seed(seed)
    args = test_fuzz.OPS[op_name].build(config, "cpu")
    with torch.backends.mkldnn.flags(enabled=mkldnn):
        x, w, b, s, p, d = args
        torch.nn.functional.conv2d(x, w, b, s, p, d, groups=x.shape[1])
    print("eager ok", flush=True)
    sys.exit(0)

import test_fuzz  # noqa: E402

op_name = sys.argv[1]
first, size, count = test_fuzz.PLAN[("cpu", "values")]
code = (f"import sys; sys.path.insert(0, 'tests'); import test_fuzz\n"
        f"for seed in range({first}, {first + size * count}):\n"
        f"    print(seed, flush=True)\n"
        f"    try: test_fuzz.check({op_name!r}, seed, 'cpu')\n"
        f"    except Exception: pass\n")
r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
last = r.stdout.split()[-1] if r.stdout.split() else None
print("replay rc", r.returncode, "last seed", last)
if r.returncode != 0 and last:
    for mkldnn in ("1", "0"):
        e = subprocess.run([sys.executable, __file__, op_name, last, mkldnn], capture_output=True, text=True)
        print(f"eager mkldnn={mkldnn}: rc {e.returncode}", e.stdout.strip()[-600:], e.stderr.strip()[-300:])
