"""The regeneration benchmark on a tiny target: every engine entry is timed with its own batch size, and a bad entry
is refused naming it."""

import pytest

from eaglehead.datagen import bench
from tests.tiny_models import save_tiny_target


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench_target")
    save_tiny_target(path, seed=5, layers=2)
    return str(path)


def test_each_engine_entry_runs_with_its_own_batch_size(target, capsys):
    assert bench.main(["--target", target, "--prompts", "3", "--max-new-tokens", "4", "--repeats", "2",
                       "--engines", "torch:float32:2,torch:float32,torch:float32:2:plain,hf-generate:float32:3"]) == 0
    out = capsys.readouterr().out
    for name in ("torch/float32/inverse-cdf/batch 2", "torch/float32/inverse-cdf/batch 32",
                 "torch/float32/inverse-cdf/batch 2/plain", "hf-generate/float32/batch 3"):
        assert out.count(f"repeat 0 {name} ") == 1 and out.count(f"repeat 1 {name} ") == 1, name
        assert f"  {name} " in out.split("median", 1)[1]  # and in the summary


@pytest.mark.parametrize("spec", ["torch:float32:0", "torch:float32:x", "hf-generate:float32:2:3", "torch:float32:2:fast",
                                  "hf-generate:float32:2:plain"])
def test_a_bad_batch_size_is_refused_naming_the_entry(target, spec, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--target", target, "--prompts", "2", "--max-new-tokens", "2", "--repeats", "1", "--engines", spec])
    assert f"{spec!r}: expected torch[:dtype[:batch[:plain]]]" in capsys.readouterr().err
