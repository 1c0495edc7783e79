"""The run folder is claimed by one run: a second run into it stops with one line before writing; the default name,
taken by a run started in the same second, moves to <name>-2."""

import pytest

from bertkit.cli import main
from bertkit.errors import BertkitError
from bertkit.training.folder import RunFolder

pytestmark = pytest.mark.skipif(__import__("os").name != "posix", reason="folder locks are POSIX advisory locks")


def test_a_folder_in_use_is_refused_and_a_default_name_moves_on(tmp_path):
    out = tmp_path / "runs" / "sst2-x"
    with RunFolder(out) as path:
        assert path == out and out.is_dir()
        with pytest.raises(BertkitError, match="is in use by another run"):
            RunFolder(out).__enter__()
        with RunFolder(out, renamable=True) as other:
            assert other == tmp_path / "runs" / "sst2-x-2"
    with RunFolder(out) as path:  # released at the block's end (and by the system when a process dies)
        (path / "metrics.json").write_text("{}")
    with pytest.raises(BertkitError, match="is not empty; pass --resume"):
        RunFolder(out).__enter__()
    with RunFolder(out, resume=True) as path:
        assert path == out
    with RunFolder(out, renamable=True) as path:
        assert path.name == "sst2-x-2"


def test_a_run_that_fails_before_writing_leaves_no_folder_it_made(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError), RunFolder(out):
        raise RuntimeError("the model did not load")
    assert not out.exists()
    out.mkdir()
    with pytest.raises(RuntimeError), RunFolder(out):
        raise RuntimeError("the model did not load")
    assert out.is_dir()  # not made by the run: left as it was


def test_finetune_into_a_folder_another_run_holds_exits_2_and_writes_nothing(tiny_bert, sst2_dir, tmp_path, capsys):
    out = tmp_path / "run"
    with RunFolder(out):
        assert main(["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(sst2_dir), "--max-steps", "2",
                     "--output-dir", str(out)]) == 2
        assert list(out.iterdir()) == []
    err = capsys.readouterr().err
    assert f"output folder {out} is in use by another run" in err and "Traceback" not in err


def test_a_filesystem_without_folder_locks_runs_unlocked(tmp_path, monkeypatch):
    import errno

    from bertkit.training import folder

    def refuse(fd, how):
        raise OSError(errno.EBADF, "Bad file descriptor")  # what NFS's emulated flock answers for a folder

    monkeypatch.setattr(folder.fcntl, "flock", refuse)
    with RunFolder(tmp_path / "run") as path:
        assert path.is_dir()
    (path / "metrics.json").write_text("{}")
    with pytest.raises(BertkitError, match="is not empty"):
        RunFolder(path).__enter__()


def test_a_folder_that_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(BertkitError, match=r"output folder .*file/run: Not a directory"):
        RunFolder(tmp_path / "file" / "run").__enter__()  # was an OSError traceback (and a wait on the other ranks)


def test_a_resume_given_other_settings_says_which(tiny_bert, sst2_dir, tmp_path, capsys):
    """--resume continues the run from its checkpoint with the config given now; one that differs from the run's
    (another learning rate, more steps, other data) is said, setting by setting; a moved run folder is not."""
    run = ["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(sst2_dir), "--precision", "fp32",
           "--save-every", "2", "--eval-every", "2"]
    assert main([*run, "--max-steps", "2", "--output-dir", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    assert main([*run, "--max-steps", "4", "--lr", "1e-3", "--output-dir", str(tmp_path / "a"), "--resume"]) == 0
    err = capsys.readouterr().err
    assert ("--resume: this run's config differs from the one it started with (lr 2e-05 → 0.001; max_steps 2 → 4); "
            "it goes on with this one, from its checkpoint") in err
    (tmp_path / "a").rename(tmp_path / "b")
    assert main([*run, "--max-steps", "4", "--lr", "1e-3", "--output-dir", str(tmp_path / "b"), "--resume"]) == 0
    err = capsys.readouterr().err
    assert "resumed from" in err and "differs" not in err


def test_resume_refuses_a_folder_of_the_other_kind_of_run(tiny_bert, sst2_dir, tmp_path, capsys):
    """`--resume --seeds` into a single run's folder wrote seed-N folders beside it and replaced its report.md;
    `--resume` without --seeds into a seeds folder trained a new run there ("no usable checkpoint")."""
    one, per_seed = tmp_path / "one", tmp_path / "per-seed"
    (one / "checkpoints").mkdir(parents=True)
    (one / "config.yaml").write_text("task: sequence-classification\n")
    (per_seed / "seed-13").mkdir(parents=True)
    (per_seed / "seed-42").mkdir()
    (per_seed / "report.md").write_text("# seeds\n")
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    base = ["finetune", "sst2", "--model", str(tiny_bert), "--data-dir", str(sst2_dir), "--resume"]
    for args, said in (
            (["--output-dir", str(one), "--seeds", "1,2"], f"--resume --seeds: {one} holds one run, not one per seed"),
            (["--output-dir", str(per_seed)], f"--resume: {per_seed} holds one run per seed (13, 42): give its "
                                              "--seeds again"),
            ([], "--resume needs --output-dir: the folder of the run to continue")):
        assert main([*base, *args]) == 2
        assert said in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before


def test_an_unfinished_run_folder_says_so_where_a_model_is_wanted(tmp_path):
    """evaluate and predict on a run stopped before its end said "has no config.json (is it a Hugging Face
    checkpoint?)"."""
    from bertkit.models import resolve_model

    run = tmp_path / "run"
    (run / "checkpoints" / "step-0000004").mkdir(parents=True)
    (run / "config.yaml").write_text("task: sequence-classification\n")
    with pytest.raises(BertkitError, match="is a run that has not finished \\(no config.json yet\\): `bertkit "
                                           "finetune ... --output-dir` it with --resume$"):
        resolve_model(str(run))
    (run / "checkpoints" / "best").mkdir()
    (run / "checkpoints" / "best" / "config.json").write_text("{}")
    with pytest.raises(BertkitError, match=f", or use its best weights so far, {run / 'checkpoints' / 'best'}$"):
        resolve_model(str(run))


def test_epochs_beside_a_recipes_max_steps_is_said(tiny_bert, sst2_dir, tmp_path, capsys):
    """A recipe's max_steps decided the run's length over a given --epochs without a word."""
    recipe = tmp_path / "steps.yaml"
    recipe.write_text("name: sst2\nmax_steps: 2\ntask_options: {label_names: [negative, positive]}\n"
                      "metrics: [accuracy]\n"
                      "validation_files: [dev.tsv]\n")
    assert main(["finetune", str(recipe), "--model", str(tiny_bert), "--data-dir", str(sst2_dir), "--epochs", "1",
                 "--output-dir", str(tmp_path / "run"), "--precision", "fp32"]) == 0
    assert "--epochs 1.0: not used; the recipe's max_steps 2 decides the run's length (--max-steps none clears it)" \
        in capsys.readouterr().err
