"""check_env names each fault of a deliberately broken env."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch
from tensordict import TensorDict
from torchrl.data import Categorical, Unbounded

from rlx.run.cli import main
from rlx.env import Env
from rlx.envs import CartPole, Pendulum, check_env


class Walker(Env):
    """A well-behaved env (episodes of 3 steps, truncated) that subclasses break one way each."""

    fault: ClassVar[str | None] = None

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(2,), device=self.device)
        self.action_spec = Categorical(2, device=self.device)
        self.t = torch.zeros(num_envs, device=self.device)

    def _obs(self) -> torch.Tensor:
        obs = torch.stack([self.t, self.t * 2], -1)
        if self.fault == "obs_shape":
            return torch.zeros(self.num_envs, 3)
        if self.fault == "obs_dtype":
            return obs.double()
        if self.fault == "obs_device":
            return torch.empty(self.num_envs, 2, device="meta")
        return obs

    def reset(self, *, config=None):
        self.t.zero_()
        return self._obs() if self.fault != "obs_device" else torch.stack([self.t, self.t], -1)

    def step(self, actions):
        self.t += 1
        truncated = (self.t >= 3).unsqueeze(-1)
        final = torch.stack([self.t, self.t * 2], -1)
        if self.fault != "no_auto_reset":
            self.t = torch.where(truncated.squeeze(-1), 0.0, self.t)
        out = {
            "obs": self._obs(),
            "rewards": torch.ones(self.num_envs) if self.fault == "rewards_1d" else torch.ones(self.num_envs, 1),
            "truncated": truncated,
            "final_obs": final,
        }
        if self.fault == "no_final_obs":
            del out["final_obs"]
        return TensorDict(out, batch_size=[self.num_envs])


def _broken(fault: str) -> type[Walker]:
    return type(f"Walker_{fault}", (Walker,), {"fault": fault})


@pytest.mark.parametrize(
    "fault, message",
    [
        ("obs_shape", r"'obs' has shape \[4, 3\], expected \[4, 2\]"),
        ("rewards_1d", r"'rewards' has shape \[4\], expected \[4, 1\]"),
        ("no_final_obs", r"returns 'truncated' but no 'final_obs'"),
        ("no_auto_reset", r"does not auto-reset"),
        ("obs_device", r"obs is on meta, but the env was built on cpu"),
        ("obs_dtype", r"'obs' has dtype torch.float64, expected torch.float32"),
    ],
)
def test_check_env_names_each_fault(fault: str, message: str, capsys) -> None:
    problems = check_env(_broken(fault), num_envs=4, steps=20)
    assert len(problems) >= 1
    assert any(__import__("re").search(message, p) for p in problems), problems
    assert "problem(s)" in capsys.readouterr().out


@pytest.mark.parametrize("env_cls", [Walker, CartPole, Pendulum])
def test_good_envs_pass(env_cls, capsys) -> None:
    assert check_env(env_cls, num_envs=3, steps=250) == []
    assert "passes" in capsys.readouterr().out


def test_device_spellings_of_the_same_device_are_no_problem(capsys) -> None:
    # cpu:0 and cpu are one device; tensors report "cpu".
    assert check_env(CartPole, num_envs=3, steps=20, device="cpu:0") == []
    with pytest.raises(ValueError, match=r"steps must be an int >= 1, got 0"):
        check_env(CartPole, steps=0)


def test_check_env_command_exits_nonzero_on_problems(capsys, tmp_path, monkeypatch) -> None:
    assert main(["check-env", "rlx.envs:CartPole", "--steps", "50"]) == 0
    (tmp_path / "broken_envs.py").write_text(
        "import torch\n"
        "from tensordict import TensorDict\n"
        "from torchrl.data import Categorical, Unbounded\n"
        "class NoRewards:\n"
        "    def __init__(self, num_envs, horizon=None, *, device='cpu'):\n"
        "        self.num_envs = num_envs\n"
        "        self.observation_spec = Unbounded(shape=(1,))\n"
        "        self.action_spec = Categorical(2)\n"
        "    def reset(self, *, config=None):\n"
        "        return torch.zeros(self.num_envs, 1)\n"
        "    def step(self, actions):\n"
        "        return TensorDict({'obs': torch.zeros(self.num_envs, 1)}, batch_size=[self.num_envs])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["check-env", "broken_envs:NoRewards"]) == 1
    out = capsys.readouterr().out
    assert "required key 'rewards' is missing" in out
