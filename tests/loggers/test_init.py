"""gyre.loggers: the facade exports every writer and write_to, and gyre re-exports them."""

import types

import gyre
import gyre.loggers

from .readers import tensorboard_values


def test_all_lists_exactly_the_public_names_and_gyre_reexports_them():
    public = {
        name for name, value in vars(gyre.loggers).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(gyre.loggers.__all__) == public
    assert gyre.loggers.__all__ == sorted(gyre.loggers.__all__)
    assert "loggers" in gyre.__all__
    for name in public - {"WriteTo"}:
        assert getattr(gyre, name) is getattr(gyre.loggers, name) and name in gyre.__all__


def test_readme_writers_section_runs(tmp_path, run_readme, capsys):
    run_readme("Writers", page="docs/how-to/writers.md")
    assert capsys.readouterr().out == "['step,loss', '0,1.0', '1,0.03999999538064003']\n"
    values = tensorboard_values(str(tmp_path / "runs" / "writers" / "tensorboard"))
    assert [s for s, _ in values["loss"]] == list(range(50))
    assert [s for s, _ in values["w"]] == [50] and "_hparams_/experiment" in values


def test_the_writers_pages_resume_example_runs_as_written(tmp_path, run_readme, capsys):
    run_readme("On resume", page="docs/how-to/writers.md")
    assert capsys.readouterr().out == f"{list(range(8))}\n{list(range(10))}\n"
    assert (tmp_path / "runs" / "resume" / "ckpt" / "6").is_dir()  # the checkpoint it resumed from
