"""`cherry data prepare|info`: output on stdout, progress on stderr, errors as promised."""
import argparse
import json

import pytest

from cherry.cli import data as data_cli


def _run(argv):
    parser = argparse.ArgumentParser(prog="cherry")
    data_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_info_prints_json(synth_tiny, data_root, capsys):
    assert _run(["data", "info", "synth-tiny", "--root", str(data_root)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["num_nodes"] == 2000 and info["num_classes"] == 5
    assert set(info["split_sizes"]) == {"train", "valid", "test"}
    assert info["degree"]["min"] <= info["degree"]["median"] <= info["degree"]["max"]


def test_prepare_prints_cache_dir_and_progress(tmp_path, capsys):
    assert _run(["data", "prepare", "synth-products", "--root", str(tmp_path), "--scale", "0.001"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(tmp_path / "synth_products_scale0.001" / "cherry")
    assert "writing raw/edge.csv.gz" in err and "synth-products ready" in err


def test_errors_propagate_for_the_cli_to_report(tmp_path):
    with pytest.raises(ValueError, match="unknown dataset 'nope'"):
        _run(["data", "info", "nope", "--root", str(tmp_path)])
    with pytest.raises(FileNotFoundError, match="ogbn_papers100M"):
        _run(["data", "prepare", "ogbn-papers100M", "--root", str(tmp_path)])
    with pytest.raises(SystemExit):  # argparse: --scale must be a number
        _run(["data", "prepare", "synth-tiny", "--scale", "big"])


def test_cherry_main_reports_one_line_error(tmp_path, capsys):
    from cherry.cli import main

    assert main(["data", "info", "nope", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cherry: error: unknown dataset 'nope'") and err.count("\n") == 1
