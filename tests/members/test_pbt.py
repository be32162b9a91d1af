"""Population-based training on the member axis (issue #31): the copy is exact, members
are independent, rankings copy the bottom from the top, and a PBT run resumes exactly."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlx import AlgorithmConfig, ConfigError, NPGConfig
from rlx.config.run import TrainerConfig
from rlx.envs import CartPole, Pendulum
from rlx.members.pbt import PBT, PBTConfig, copy_members_, parse_space
from rlx.run.trainer import Trainer

B, T = 8, 16


def _algo(S: int = 4, config_cls=AlgorithmConfig, env_cls=CartPole, **kwargs):
    base = dict(num_envs=B, horizon=T, device="cpu", seed=0, num_seeds=S, model_config={"hiddens": [16, 16]},
                optimizer_config={"lr": 3e-3})
    if config_cls is AlgorithmConfig:
        base.update(sgd_minibatch_size=32, shuffle_minibatches=False, normalize_obs=True,
                    member_hparams={"lr": [1e-3, 3e-3, 1e-2, 3e-2][:S], "entropy_coeff": [0.0, 0.01, 0.02, 0.05][:S],
                                    "clip_param": [0.1, 0.2, 0.3, 0.15][:S]})
    return config_cls(**{**base, **kwargs}).build(env_cls)


def _member(algo, i: int) -> list[torch.Tensor]:
    return [p.detach()[i].clone() for p in algo.policy.model.parameters()]


def _copy_rollout_rows(algo, src: int, dst: int) -> None:
    for key in algo.buffer.keys():
        x = algo.buffer.get(key)
        x[dst * B : (dst + 1) * B] = x[src * B : (src + 1) * B]


@pytest.mark.parametrize("config_cls,env_cls", [(AlgorithmConfig, CartPole), (NPGConfig, Pendulum)], ids=["ppo", "npg"])
def test_a_copied_members_next_update_equals_its_sources(config_cls, env_cls) -> None:
    extra = {} if config_cls is AlgorithmConfig else {"member_hparams": {"max_kl": [0.01, 0.02, 0.005, 0.03]},
                                                      "fvp_subsample": 1.0, "optim_critic_iters": 1}
    algo = _algo(config_cls=config_cls, env_cls=env_cls, **extra)
    for _ in range(2):  # optimizer moments, normalizers and step counts worth copying
        algo.collect()
        algo.step()
    algo.collect()
    copy_members_(algo, [1], [3])
    assert algo.member_values("lr")[3] == algo.member_values("lr")[1]
    for name in algo.hparams.names:
        assert algo.member_values(name)[3] == algo.member_values(name)[1], name
    _copy_rollout_rows(algo, 1, 3)  # the same data
    algo.step()
    for a, b in zip(_member(algo, 1), _member(algo, 3)):
        if config_cls is AlgorithmConfig:
            assert torch.equal(a, b)
        else:  # NPG's critic epoch shuffles each member's rows in its own order: sums round apart
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert not all(torch.equal(a, b) for a, b in zip(_member(algo, 0), _member(algo, 1)))


def test_a_done_member_leaves_the_others_updates_unchanged() -> None:
    runs = []
    for done in (False, True):
        algo = _algo()
        if done:
            algo.members.mark_done([2])
        before = _member(algo, 2)
        for _ in range(2):
            algo.collect()
            algo.step()
        runs.append((algo, before))
    (free, _), (stopped, before) = runs
    for i in (0, 1, 3):
        for a, b in zip(_member(free, i), _member(stopped, i)):
            assert torch.equal(a, b)
    for a, b in zip(_member(stopped, 2), before):
        assert torch.equal(a, b)


def test_a_ranking_copies_the_bottom_from_the_top_and_perturbs_what_it_explores(tmp_path) -> None:
    algo = _algo()
    pbt = PBT(algo, PBTConfig(members=4, every=2, hparams=["lr", "entropy_coeff"], seed=1), tmp_path)
    algo.collect()
    algo.step()
    scores = {"member0/episodes/return_mean": 5.0, "member1/episodes/return_mean": 50.0,
              "member2/episodes/return_mean": 20.0, "member3/episodes/return_mean": 30.0}
    assert pbt.step(1, scores) == {}  # not a ranking iteration
    lrs, entropies = algo.member_values("lr"), algo.member_values("entropy_coeff")
    before = [_member(algo, i) for i in range(4)]
    out = pbt.step(2, {**scores, "member1/episodes/return_mean": math.nan})  # a NaN: its window keeps 50
    assert out == {"pbt/copies": 1.0}
    (event,) = pbt.lineage
    assert (event["member"], event["source"], event["score"], event["source_score"]) == (0, 1, 5.0, 50.0)
    for a, b in zip(_member(algo, 0), before[1]):
        assert torch.equal(a, b)
    for i in (1, 2, 3):  # untouched
        for a, b in zip(_member(algo, i), before[i]):
            assert torch.equal(a, b)
    assert algo.member_values("lr")[0] / lrs[1] in (pytest.approx(0.8), pytest.approx(1.25))
    assert algo.member_values("entropy_coeff")[0] / entropies[1] in (pytest.approx(0.8), pytest.approx(1.25))
    assert algo.member_values("lr")[1:] == pytest.approx(lrs[1:])
    assert json.loads((tmp_path / "lineage.jsonl").read_text()) == event


def test_a_diverged_member_ranks_last_and_is_revived_by_a_copy() -> None:
    algo = _algo()
    algo.members.alive[2] = False
    pbt = PBT(algo, PBTConfig(members=4, every=1, seed=0))
    metrics = {f"member{i}/episodes/return_mean": float(10 * i) for i in range(4)}  # member 2 "scores" 20, but is dead
    pbt.step(1, metrics)
    assert pbt.lineage[0]["member"] == 2 and pbt.lineage[0]["source"] == 3
    assert bool(algo.members.alive[2])


def test_pbt_in_the_trainer_resumes_exactly(tmp_path) -> None:
    def train(run_dir, iterations: int, resume: bool = False) -> Trainer:
        algo = _algo()
        cfg = TrainerConfig(max_iterations=iterations, checkpoint_every=3, progress=False, tensorboard=False,
                            pbt={"members": 4, "every": 2, "hparams": ["lr", "clip_param"], "resample": 0.5,
                                 "space": {"lr": "loguniform(1e-4, 1e-1)", "clip_param": "uniform(0.05, 0.4)"}})
        trainer = Trainer(algo, cfg, run_dir=run_dir)
        if resume:
            trainer.resume()
        trainer.run()
        return trainer

    whole = train(tmp_path / "a", 6)
    train(tmp_path / "b", 3)
    resumed = train(tmp_path / "b", 6, resume=True)
    for a, b in zip(whole.algorithm.policy.model.parameters(), resumed.algorithm.policy.model.parameters()):
        assert torch.equal(a, b)
    assert whole.pbt.lineage == resumed.pbt.lineage and len(whole.pbt.lineage) >= 3
    lines = [json.loads(x) for x in (tmp_path / "b" / "lineage.jsonl").read_text().splitlines()]
    assert lines == whole.pbt.lineage
    rows = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[1]["pbt/copies"] >= 1 and "member0/hparams/clip_param" in rows[-1]


def test_bad_pbt_settings_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"trainer.pbt: unknown key\(s\) \['member'\]"):
        TrainerConfig(pbt={"member": 4})
    with pytest.raises(ConfigError, match="trainer.pbt.fraction: must be in"):
        PBTConfig(fraction=0.9)
    with pytest.raises(ConfigError, match=r"trainer.pbt.resample: draws from a space, and \['lr'\] have none"):
        PBTConfig(resample=0.2)
    with pytest.raises(ConfigError, match="trainer.pbt.space.lr: loguniform needs positive bounds"):
        PBTConfig(space={"lr": "loguniform(0, 1)"})
    with pytest.raises(ConfigError, match="trainer.pbt.members: 8, but the algorithm has num_seeds=4"):
        PBT(_algo(), PBTConfig(members=8))
    with pytest.raises(ConfigError, match="explores 'gamma', which the config does not vary per member"):
        PBT(_algo(), PBTConfig(members=4, hparams=["gamma"]))
    assert str(parse_space("choice(1, 2,3)")) == "choice(1, 2, 3)"
