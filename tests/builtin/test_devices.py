"""The CPU facts every speed figure is recorded with (model, the bf16/AMX flags) and the bf16 decision."""

import torch

from eaglehead.builtin.devices import SPEED_FLAGS, cpu_info, native_bf16
from eaglehead.eval.assembly import hardware


def test_cpu_info_reads_model_and_the_speed_flags_in_a_fixed_order(tmp_path):
    p = tmp_path / "cpuinfo"
    p.write_text("processor\t: 0\nmodel name\t: Test CPU @ 2GHz\nflags\t\t: fpu amx_tile sse avx512_bf16 avx2 "
                 "amx_bf16\n\nprocessor\t: 1\nmodel name\t: Test CPU @ 2GHz\nflags\t\t: fpu\n")
    info = cpu_info(str(p))
    assert info == {"model": "Test CPU @ 2GHz", "flags": ["avx2", "avx512_bf16", "amx_bf16", "amx_tile"]}
    assert set(info["flags"]) <= set(SPEED_FLAGS)


def test_cpu_info_without_a_readable_file(tmp_path):
    assert cpu_info(str(tmp_path / "missing")) == {"model": None, "flags": []}


def test_the_eval_report_records_the_cpu_flags_and_native_bf16_agrees_with_them():
    hw = hardware(torch.device("cpu"))
    info = cpu_info()
    assert hw["cpu_flags"] == info["flags"] and hw["cpu_count"] >= 1
    assert native_bf16("cpu") == ("avx512_bf16" in info["flags"] or "amx_bf16" in info["flags"])
