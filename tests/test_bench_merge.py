"""One report from the shares of a sharded bench run and its re-runs (bench/merge.py)."""
import json

import pytest

from bench import merge
from test_bench_targets import record

META = {"card": "NVIDIA H200", "torch": "2.11.0+cu130", "sources": "096da63c55ed", "host_slack_us": 200.0}


def write_run(path, date, modes, shard, records, **meta):
    path.write_text(json.dumps({"meta": {**META, "date": date, "modes": modes, "shard": shard, **meta},
                                "results": records}))
    return str(path)


def test_shares_and_a_rerun_merge_into_one_report_in_bench_order(tmp_path, capsys):
    dw, dws = "mobilenet_v2/dw_b1_c32_h112_k3_s1", "mobilenet_v2/dws_b1_c32_h112_k3_s1_o16"
    skipped = record(dws, "tf32", "depthwise_separable_conv2d", speedup=1.2, max_autotune=False)
    skipped["columns"]["max_autotune"]["note"] = "skipped (time budget)"
    files = [
        write_run(tmp_path / "s0.json", "2026-11-28 14:21 UTC", ["tf32"], [0, 2],
                  [skipped, record("seed/L1-82_depthwise", "bf16", "depthwise_conv2d", speedup=3.3)]),
        write_run(tmp_path / "s1.json", "2026-11-28 14:21 UTC", ["tf32", "bf16"], [1, 2],
                  [record(dw, "tf32", "depthwise_conv2d", speedup=1.1),
                   record("seed/L1-82_depthwise", "tf32", "depthwise_conv2d", speedup=3.2)]),
        write_run(tmp_path / "again.json", "2026-11-28 14:39 UTC", ["tf32"], None,
                  [record(dws, "tf32", "depthwise_separable_conv2d", speedup=1.25)]),
    ]
    assert merge.main(files + ["--out", str(tmp_path / "out")]) == 0
    assert "merged 4 rows of 3 runs" in capsys.readouterr().out
    [merged_json] = (tmp_path / "out").glob("bench-merged-*.json")
    merged = json.loads(merged_json.read_text())
    # The seed first, tf32 before bf16, then the sweep in bench/cases.py's order; the re-run's row replaced the
    # share's, so no max-autotune column is left skipped for the budget.
    assert [(r["case"], r["mode"]) for r in merged["results"]] == [
        ("seed/L1-82_depthwise", "tf32"), ("seed/L1-82_depthwise", "bf16"), (dw, "tf32"), (dws, "tf32")]
    assert merged["results"][3]["speedup"] == 1.25
    meta = merged["meta"]
    assert meta["skipped_for_budget"] == 0 and meta["timed_while_busy"] == 0
    assert meta["date"] == "2026-11-28 14:21 UTC to 2026-11-28 14:39 UTC" and meta["modes"] == ["tf32", "bf16"]
    assert [run["shard"] for run in meta["merged"]] == [[0, 2], [1, 2], None] and "shard" not in meta
    markdown = merged_json.with_suffix(".md").read_text()
    assert ("Merged from 3 runs (python -m bench.merge; a later run's row replaces an earlier one's): "
            "2026-11-28 14:21 UTC tf32 in 2 shares; 2026-11-28 14:21 UTC tf32,bf16 in 2 shares; "
            "2026-11-28 14:39 UTC tf32\n") in markdown


@pytest.mark.parametrize("field", ["card", "torch", "sources"])
def test_runs_of_another_card_or_tree_are_refused(tmp_path, capsys, field):
    row = [record("seed/L1-82_depthwise", "tf32", "depthwise_conv2d", speedup=3.2)]
    first = write_run(tmp_path / "a.json", "2026-11-28 14:21 UTC", ["tf32"], None, row)
    second = write_run(tmp_path / "b.json", "2026-11-28 14:30 UTC", ["tf32"], None, row, **{field: "other"})
    with pytest.raises(SystemExit) as exit_info:
        merge.main([first, second, "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert f"b.json has {field} 'other'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_rows_the_budget_cut_get_a_command_that_times_exactly_them_again():
    from bench.cases import all_cases, select
    cut = [record("convnext_t/dws_b32_c384_h14_k7_s1_o1536", "tf32", "depthwise_separable_conv2d", speedup=1.3),
           record("convnext_t/dws_b32_c768_h7_k7_s1_o3072", "tf32", "depthwise_separable_conv2d", speedup=1.2),
           record("gn_block/b16_c128-256_h28_k3_s1_p0_g16_pool4_scale-negative_clamp-0.5..0.5", "bf16", "gn",
                  speedup=1.0)]
    for r in cut:
        r["columns"]["max_autotune"] = {"status": "skipped", "ms": None, "note": "skipped (time budget)"}
    whole = record("convnext_t/dws_b32_c384_h14_k7_s1_o1536", "bf16", "depthwise_separable_conv2d", speedup=1.1)
    commands = merge.rerun_commands([whole, *cut])
    assert [c.split("--modes ")[1] for c in commands] == ["tf32 --autotune all", "bf16 --autotune all"]
    pattern = commands[0].split("--cases '")[1].split("'")[0]
    assert [c.name for c in select(all_cases(), pattern)] == [r["case"] for r in cut[:2]]
    pattern = commands[1].split("--cases '")[1].split("'")[0]
    assert [c.name for c in select(all_cases(), pattern)] == [cut[2]["case"]]
