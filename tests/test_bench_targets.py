"""The issues' targets checked against bench JSON (bench/targets.py): seeds, sweeps, accuracy and merging runs."""
import json

from bench import targets


def record(case, mode, op, speedup=None, floor_fraction=None, max_autotune=True, status="ok", max_error=0.0):
    """A bench row as bench/runner.py writes it, with only what the targets read."""
    columns = {name: {"status": status, "ms": 1.0, "max_error": max_error} for name in targets.CONVOPS_COLUMNS}
    columns["max_autotune"] = {"status": "ok", "ms": 2.0} if max_autotune else {"status": "skipped", "ms": None}
    return {"case": case, "group": case.split("/", 1)[0], "op": op, "mode": mode, "columns": columns,
            "speedup": speedup, "floor_fraction": floor_fraction, "best_baseline": "inductor"}


GN = "conv2d_group_norm_scale_max_pool_clamp"


def by_target(found):
    return {(v.issue, v.target): v for v in found}


def test_a_seed_meets_its_target_only_with_every_part_of_it():
    rows = [record("seed/L1-82_depthwise", "fp32", "depthwise_conv2d", speedup=3.2, floor_fraction=0.93),
            record("seed/L1-82_depthwise", "bf16", "depthwise_conv2d", speedup=4.0, floor_fraction=0.84)]
    found = by_target(targets.verdicts(rows, [5]))
    assert found[(5, "L1-82_depthwise fp32")].met
    assert found[(5, "L1-82_depthwise fp32")].measured == "93.0% of floor, 3.20x over inductor"
    assert not found[(5, "L1-82_depthwise bf16")].met  # 84% of the floor, 85% asked
    assert found[(5, "L1-86_depthwise_separable tf32")].measured == "not in these runs"
    assert not found[(5, "L1-86_depthwise_separable tf32")].met


def test_a_speedup_target_needs_max_autotune_in_the_run():
    rows = [record("seed/L1-82_depthwise", "fp32", "depthwise_conv2d", speedup=3.5, floor_fraction=0.93,
                   max_autotune=False)]
    verdict = by_target(targets.verdicts(rows, [5]))[(5, "L1-82_depthwise fp32")]
    assert not verdict.met and verdict.measured.endswith("max-autotune not in this run")


def test_the_sweep_counts_every_non_seed_row_of_the_issue_ops():
    rows = [record("mobilenet_v2/dw_b1", "bf16", "depthwise_conv2d", speedup=0.994),
            record("mobilenet_v2/dws_b1", "tf32", "depthwise_separable_conv2d", speedup=1.2),
            record("unet/convT2d", "tf32", "conv_transpose2d", speedup=0.5),  # issue #6's
            record("seed/L1-82_depthwise", "fp32", "depthwise_conv2d", speedup=0.5)]  # a seed, not the sweep
    sweep = by_target(targets.verdicts(rows, [5]))[(5, "sweep, 2 rows")]
    assert not sweep.met and sweep.measured == "1 below: mobilenet_v2/dw_b1 bf16 0.994x"
    rows[0]["speedup"] = 1.0  # a tie is not slower, but it is counted as near
    sweep = by_target(targets.verdicts(rows, [5]))[(5, "sweep, 2 rows")]
    assert sweep.met and sweep.measured == "all; lowest 1.000x (mobilenet_v2/dw_b1 bf16); 1 within 3% above"
    rows[0]["speedup"] = 1.03  # a lead of the margin is not near
    sweep = by_target(targets.verdicts(rows, [5]))[(5, "sweep, 2 rows")]
    assert sweep.measured == "all; lowest 1.030x (mobilenet_v2/dw_b1 bf16)"


def test_the_sweep_needs_max_autotune_on_every_row():
    rows = [record("mobilenet_v2/dw_b1", "bf16", "depthwise_conv2d", speedup=1.2),
            record("mobilenet_v2/dws_b1", "tf32", "depthwise_separable_conv2d", speedup=1.5, max_autotune=False)]
    sweep = by_target(targets.verdicts(rows, [5]))[(5, "sweep, 2 rows")]
    assert not sweep.met  # the row without max-autotune may be slower than it
    assert sweep.measured == ("all; lowest 1.200x (mobilenet_v2/dw_b1 bf16); max-autotune not run on "
                              "1 of 2 rows")
    rows[0]["speedup"] = 0.9
    sweep = by_target(targets.verdicts(rows, [5]))[(5, "sweep, 2 rows")]
    assert sweep.measured == "1 below: mobilenet_v2/dw_b1 bf16 0.900x; max-autotune not run on 1 of 2 rows"


def test_issue_7_asks_3x_of_every_sweep_row():
    rows = [record("gn_block/a", "bf16", "conv2d_group_norm_scale_max_pool_clamp", speedup=2.9)]
    sweep = by_target(targets.verdicts(rows, [7]))[(7, "sweep, 1 rows")]
    assert sweep.asked == "3x each" and not sweep.met


def test_a_failed_check_fails_accuracy():
    rows = [record("mobilenet_v2/dw_b1", "bf16", "depthwise_conv2d", speedup=1.1),
            record("mobilenet_v2/dw_b32", "bf16", "depthwise_conv2d", speedup=1.1, status="fail")]
    accuracy = by_target(targets.verdicts(rows, [5]))[(5, "accuracy")]
    assert not accuracy.met and accuracy.measured.startswith("3 failed: mobilenet_v2/dw_b32 bf16 convops_kernel")


def test_accuracy_holds_fp32_and_tf32_to_1e4_of_eager_and_reports_bf16():
    rows = [record("mobilenet_v2/dw_b1", "tf32", "depthwise_conv2d", speedup=1.1, max_error=2e-6),
            record("mobilenet_v2/dw_b1", "bf16", "depthwise_conv2d", speedup=1.1, max_error=7.8e-3)]
    accuracy = by_target(targets.verdicts(rows, [5]))[(5, "accuracy")]
    assert accuracy.met and accuracy.measured.endswith("largest difference from eager on the rows: bf16 7.8e-03, "
                                                       "tf32 2.0e-06")
    rows.append(record("mobilenet_v2/dw_b32", "fp32", "depthwise_conv2d", speedup=1.1, max_error=2e-4))
    accuracy = by_target(targets.verdicts(rows, [5]))[(5, "accuracy")]
    assert not accuracy.met and "fp32 2.0e-04" in accuracy.measured  # the runner's check passed, 1e-4 did not


def test_conv_transpose_and_group_norm_accuracy_is_held_on_their_seeds_and_reported_on_the_rest():
    """#6 asks 1e-4 of eager TF32 on its seeds, #7 1e-4 of eager on its seed in the same mode; their sweep rows only
    pass the runner's check (two TF32 convolutions differ by about 1e-3)."""
    rows = [record("seed/L1-65_conv_transpose2d", "tf32", "conv_transpose2d", speedup=1.8, max_error=3e-6),
            record("seed/L1-65_conv_transpose2d", "fp32", "conv_transpose2d", speedup=1.4, max_error=2e-4),
            record("unet/convT2d_k2", "tf32", "conv_transpose2d", speedup=1.1, max_error=3.7e-4)]
    accuracy = by_target(targets.verdicts(rows, [6]))[(6, "accuracy")]
    assert accuracy.met, accuracy  # fp32 is not #6's ask; the sweep row's 3.7e-4 is reported
    assert accuracy.measured.endswith("on the seed rows: fp32 2.0e-04, tf32 3.0e-06; on all rows: fp32 2.0e-04, "
                                      "tf32 3.7e-04")
    rows = [record("seed/L2-85_conv_gn_scale_pool_clamp", "fp32", GN, speedup=3.7, max_error=2e-4),
            record("gn_block/b8", "tf32", GN, speedup=1.1, max_error=2e-3)]
    accuracy = by_target(targets.verdicts(rows, [7]))[(7, "accuracy")]
    assert not accuracy.met and "on the seed rows: fp32 2.0e-04" in accuracy.measured  # #7 holds its seed in fp32
    rows[0] = record("seed/L2-85_conv_gn_scale_pool_clamp", "fp32", GN, speedup=3.7, max_error=3e-5)
    assert by_target(targets.verdicts(rows, [7]))[(7, "accuracy")].met


def test_a_later_run_replaces_a_row_and_the_exit_status_says_whether_all_are_met(tmp_path, capsys):
    first, second = tmp_path / "full.json", tmp_path / "autotune.json"
    first.write_text(json.dumps({"results": [
        record("seed/L1-82_depthwise", "fp32", "depthwise_conv2d", speedup=3.5, floor_fraction=0.93,
               max_autotune=False)]}))
    second.write_text(json.dumps({"results": [
        record("seed/L1-82_depthwise", "fp32", "depthwise_conv2d", speedup=3.1, floor_fraction=0.93)]}))
    rows = targets.load([str(first), str(second)])
    assert len(rows) == 1 and rows[0]["speedup"] == 3.1
    assert targets.main([str(first), str(second), "--issue", "5"]) == 1  # the other #5 targets are not in the files
    out = capsys.readouterr().out
    assert "L1-82_depthwise fp32" in out and "3.10x over inductor" in out and "NOT MET" in out
