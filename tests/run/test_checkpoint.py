"""Checkpoint files: newest-k pruning, safe loads, atomic writes, the format check."""

from __future__ import annotations

import pytest
import torch

from rlx import AlgorithmConfig, Trainer, TrainerConfig
from rlx.run.checkpoint import CHECKPOINT_FORMAT, latest_checkpoint, load_checkpoint, load_resumable, save_checkpoint_atomic
from rlx.envs import CartPole

SMALL = dict(num_envs=8, horizon=16, device="cpu", seed=0, model_config={"hiddens": [16]}, gamma=0.99)


def test_checkpoints_keep_the_newest_k_and_load_safely(tmp_path) -> None:
    trainer = Trainer(
        AlgorithmConfig(**SMALL).build(CartPole),
        TrainerConfig(max_iterations=7, checkpoint_every=2, keep_checkpoints=2, progress=False),
        run_dir=tmp_path,
    )
    trainer.run()
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["ckpt_00000006.pt", "ckpt_00000007.pt"]  # plus the final one at the stop
    state = load_checkpoint(latest_checkpoint(tmp_path))  # weights_only=True inside
    assert state["trainer"]["iteration"] == 7 and state["config"]["algorithm"] == "ppo"


def test_a_crash_while_writing_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch) -> None:
    path = tmp_path / "ckpt.pt"
    save_checkpoint_atomic({"x": torch.arange(3)}, path)

    def crash(obj, f, *args, **kwargs):
        f.write(b"partial bytes")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint_atomic({"x": torch.arange(5)}, path)
    monkeypatch.undo()
    assert torch.equal(load_checkpoint(path)["x"], torch.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]



def test_a_checkpoint_of_another_format_is_refused_naming_both(tmp_path) -> None:
    path = tmp_path / "ckpt.pt"
    save_checkpoint_atomic({"format": CHECKPOINT_FORMAT + 1, "rlx_version": "9.9", "algorithm": {}, "trainer": {}}, path)
    with pytest.raises(ValueError, match=rf"format {CHECKPOINT_FORMAT + 1} \(written by rlx 9.9\); this rlx reads format 1"):
        load_resumable(path)


def test_an_unreadable_checkpoint_is_named_in_one_short_line(tmp_path) -> None:
    """torch's own text for these runs to paragraphs of advice (weights_only defaults, where
    to file an issue) that does not apply to a damaged file."""
    good = save_checkpoint_atomic({"x": torch.arange(1000)}, tmp_path / "good.pt")
    data = good.read_bytes()
    cases = {
        "cut.pt": (data[:100], r"cut\.pt is unreadable: truncated or not a torch file \(100 bytes; \w+\)$"),
        "half.pt": (data[: len(data) // 2], r"half\.pt is unreadable: truncated or not a torch file"),
        "empty.pt": (b"", r"empty\.pt is unreadable: truncated or not a torch file \(0 bytes"),
        "text.pt": (b"not a checkpoint at all\n", r"text\.pt is unreadable: truncated or not a torch file"),
    }
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match=message) as caught:
            load_checkpoint(tmp_path / name)
        assert "\n" not in str(caught.value) and len(str(caught.value)) < 200 + len(str(tmp_path))
    torch.save({"x": torch.nn.Linear(1, 1)}, tmp_path / "objects.pt")  # readable, but not plain data
    with pytest.raises(ValueError, match=r"holds objects other than tensors and plain data"):
        load_checkpoint(tmp_path / "objects.pt")
