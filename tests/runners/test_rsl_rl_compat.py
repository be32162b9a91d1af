"""What an Isaac Lab or mjlab script calls on rsl_rl's runner, with rlx's: rsl_rl 5's
algorithm and model API, cfg keys, iteration numbering, logging, play with fewer envs,
recurrent and CNN models, exports, and rsl_rl's own checkpoints."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from rlx.examples.windy_reach import WindyReach
from rlx.runners import OnPolicyRunner

#: rsl_rl 5.x's layout, small networks.
CFG = {
    "num_steps_per_env": 8, "save_interval": 50, "obs_groups": {"actor": ["policy"], "critic": ["policy", "critic"]},
    "algorithm": {"class_name": "PPO", "num_learning_epochs": 2, "num_mini_batches": 2},
    "actor": {"class_name": "MLPModel", "hidden_dims": [32, 32], "activation": "elu",
              "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": 1.0}},
    "critic": {"class_name": "MLPModel", "hidden_dims": [32, 32], "activation": "elu"},
}


class CountingReach(WindyReach):
    """WindyReach that counts the runner's calls of ``reset`` and ``step``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.resets = self.steps = 0

    def reset(self):
        self.resets += 1
        return self.get_observations()

    def step(self, actions):
        self.steps += 1
        return super().step(actions)


class PixelVecEnv:
    """An rsl_rl VecEnv of :class:`rlx.envs.PixelReach`: an ``image`` group (the grid)
    and a ``policy`` group (a constant 1, a vector group beside the image)."""

    num_actions = 1
    max_episode_length = 28

    def __init__(self, num_envs: int) -> None:
        from rlx.envs import PixelReach

        self.inner = PixelReach(num_envs)
        self.num_envs, self.device, self.cfg = num_envs, torch.device("cpu"), {}
        self.episode_length_buf = self.inner.steps
        self._obs = self._groups(self.inner.reset())

    def _groups(self, obs: TensorDict) -> TensorDict:
        ones = torch.ones(self.num_envs, 1)
        return TensorDict({"image": obs["pixels"], "policy": ones}, batch_size=[self.num_envs])

    def get_observations(self) -> TensorDict:
        return self._obs

    def step(self, actions):
        # One continuous action: its value picks the move (a Gaussian policy on a grid).
        move = ((actions[:, 0].clamp(-2, 1.999) + 2.0)).floor().long()
        out = self.inner.step(move)
        self._obs = self._groups(out["obs"])
        dones = (out["terminated"] | out["truncated"])[:, 0]
        return self._obs, out["rewards"][:, 0], dones.float(), {"time_outs": out["truncated"][:, 0].float()}


def _quiet():
    return contextlib.redirect_stdout(io.StringIO())


def test_rsl_rl_5s_algorithm_api_over_rlxs_policy(tmp_path: Path) -> None:
    runner = OnPolicyRunner(WindyReach(16, "cpu", seed=0), CFG, log_dir=str(tmp_path), device="cpu")
    alg = runner.alg
    assert alg.get_policy() is alg.actor and not alg.actor.is_recurrent
    # The views hold the policy's own tensors: the actor's MLP and std, the critic's MLP.
    policy_tensors = {id(t) for t in alg.policy.state_dict(keep_vars=True).values()}
    assert {id(t) for t in alg.actor.state_dict(keep_vars=True).values()} <= policy_tensors
    assert "model.log_std" in alg.actor.state_dict() and "model.log_std" not in alg.critic.state_dict()
    assert any(k.startswith("model.critic.") for k in alg.critic.state_dict())
    before = copy.deepcopy(alg.actor.state_dict())
    with _quiet():
        runner.learn(2)
    assert any(not torch.equal(before[k], v) for k, v in alg.actor.state_dict().items())
    saved = copy.deepcopy(alg.save())
    # load_cfg: the actor alone; the critic and the optimizer stay.
    critic = copy.deepcopy(alg.critic.state_dict())
    with _quiet():
        runner.learn(1)
    assert alg.load(saved, {"actor": True}, strict=True) is False
    assert all(torch.equal(saved["actor_state_dict"][k], v) for k, v in alg.actor.state_dict().items())
    assert any(not torch.equal(critic[k], v) for k, v in alg.critic.state_dict().items())
    with pytest.raises(RuntimeError, match="Missing key"):
        alg.load({"actor_state_dict": {}}, {"actor": True}, strict=True)
    alg.load({"actor_state_dict": {}}, {"actor": True}, strict=False)  # strict=False: nothing missing matters
    alg.eval_mode()
    assert not alg.policy.training
    alg.train_mode()
    assert alg.policy.training
    alg.learning_rate = 3e-4
    assert alg.learning_rate == pytest.approx(3e-4) and alg.lr == pytest.approx(3e-4)
    assert runner.logger.log_dir == str(tmp_path) and runner.logger.writer is not None
    assert float(alg.actor.output_std.mean()) > 0


def test_runner_load_cfg_strict_and_the_iteration(tmp_path: Path) -> None:
    runner = OnPolicyRunner(WindyReach(16, "cpu", seed=0), CFG, log_dir=str(tmp_path), device="cpu")
    with _quiet():
        runner.learn(3)
    assert runner.current_learning_iteration == 2
    path = str(tmp_path / "model_2.pt")
    other = OnPolicyRunner(WindyReach(16, "cpu", seed=1), CFG, device="cpu")
    other.load(path, load_cfg={"actor": True, "critic": True, "optimizer": False, "iteration": False})
    assert other.current_learning_iteration == 0  # iteration not loaded
    for k, v in runner.alg.actor.state_dict().items():
        assert torch.equal(other.alg.actor.state_dict()[k], v)
    assert not other.alg.optimizer.state  # optimizer not loaded
    other.load(path, load_cfg={"optimizer": True, "iteration": True})
    assert other.current_learning_iteration == 2 and other.alg.optimizer.state


def test_the_runner_never_resets_or_steps_the_env_outside_learn_and_takes_unknown_keys() -> None:
    env = CountingReach(16, "cpu", seed=0)
    cfg = {**CFG, "policy": {}, "empirical_normalization": {}, "init_at_random_ep_len": True, "wandb_tags": ["a"],
           "some_newer_key": 1}  # Isaac Lab's to_dict() leaves unset sections empty
    with pytest.warns(UserWarning, match="some_newer_key"):
        runner = OnPolicyRunner(env, cfg, device="cpu")
    assert (env.resets, env.steps) == (0, 0)
    with _quiet():
        runner.learn(1)
    assert (env.resets, env.steps) == (0, 8)
    with pytest.raises(Exception, match="'bogus'\\]: unknown PPO field"):  # rsl_rl's PPO refuses these too
        OnPolicyRunner(env, {**CFG, "algorithm": {**CFG["algorithm"], "bogus": 1}}, device="cpu")


def test_play_with_fewer_envs_than_training(tmp_path: Path) -> None:
    """Isaac Lab's play tasks use 50 envs: the checkpoint's policy, optimizer and
    normalizers load; the envs start afresh."""
    cfg = copy.deepcopy(CFG)
    cfg["actor"]["obs_normalization"] = cfg["critic"]["obs_normalization"] = True
    runner = OnPolicyRunner(WindyReach(64, "cpu", seed=0), cfg, log_dir=str(tmp_path), device="cpu")
    with _quiet():
        runner.learn(2)
    play_env = WindyReach(50, "cpu", seed=1)
    play = OnPolicyRunner(play_env, cfg, device="cpu")
    play.load(str(tmp_path / "model_1.pt"))
    for a, b in zip(runner.alg.policy.state_dict().values(), play.alg.policy.state_dict().values()):
        assert torch.equal(a, b)
    policy = play.get_inference_policy(device="cpu")
    obs = play_env.get_observations()
    for _ in range(3):
        obs, _, dones, _ = play_env.step(policy(obs))
        policy.reset(dones)
    with _quiet():
        play.learn(1)  # and it trains on from there


RNN = {"class_name": "RNNModel", "hidden_dims": [32], "rnn_type": "gru", "rnn_hidden_dim": 16, "rnn_num_layers": 1}


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_rnn_model_trains_resets_per_env_and_exports(rnn_type: str, tmp_path: Path) -> None:
    """An RNNModel trains, resets each env's state alone and exports rsl_rl's deployed
    module. (Its update compiled whole: tests/algorithms/test_one_update.py; the runner's
    torch_compile_mode: tests/runners/test_on_policy.py. Each compile costs a CI core a
    minute.)"""
    # Windows of 4 steps (sequences of 4).
    cfg = {**CFG, "num_steps_per_env": 4, "obs_groups": {"actor": ["policy"], "critic": ["policy", "critic"]},
           "actor": {**RNN, "rnn_type": rnn_type, "distribution_cfg": {"class_name": "GaussianDistribution"}},
           "critic": {**RNN, "rnn_type": rnn_type}}
    env = WindyReach(16, "cpu", seed=0)
    runner = OnPolicyRunner(env, cfg, log_dir=str(tmp_path), device="cpu")
    model = runner.alg.policy.model
    assert runner.config.sequence_length == 4 and model.separate_critic and model.cell == rnn_type
    before = copy.deepcopy(runner.alg.actor.state_dict())
    with _quiet():
        runner.learn(2)
    assert any(not torch.equal(before[k], v) for k, v in runner.alg.actor.state_dict().items())
    policy = runner.get_inference_policy()
    assert policy.is_recurrent
    obs = env.get_observations()
    first = policy(obs)
    second = policy(obs)  # the state moved on
    assert not torch.equal(first, second)
    dones = torch.zeros(16)
    dones[:4] = 1
    policy.reset(dones)  # those 4 envs start again, the others keep their state
    third = policy(obs)
    torch.testing.assert_close(third[:4], first[:4])
    assert not torch.equal(third[4:], first[4:])
    # TorchScript: one env, its state inside, reset() restarts it (rsl_rl's deployed module).
    runner.export_policy_to_jit(str(tmp_path / "exported"))
    jit = torch.jit.load(str(tmp_path / "exported" / "policy.pt"))
    policy.reset()
    one = obs[:1]
    expected = [policy(one), policy(one)]
    got = [jit(one["policy"]), jit(one["policy"])]
    jit.reset()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(jit(one["policy"]), expected[0])
    if importlib.util.find_spec("onnxruntime") and importlib.util.find_spec("onnxscript"):
        import onnxruntime as ort

        runner.export_policy_to_onnx(str(tmp_path / "exported"))  # checked against the eager step inside
        session = ort.InferenceSession(str(tmp_path / "exported" / "policy.onnx"), providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == ["obs", "h_in"]
        h = runner.alg.algorithm.policy.initial_state(16).numpy()
        policy.reset()
        for _ in range(2):  # the state goes round through h_in / h_out
            actions, h = session.run(None, {"obs": obs["policy"].numpy(), "h_in": h})
            torch.testing.assert_close(torch.from_numpy(actions), policy(obs), atol=1e-5, rtol=1e-5)


def test_cnn_model_trains_checkpoints_and_exports(tmp_path: Path) -> None:
    cfg = {**CFG, "obs_groups": {"actor": ["policy", "image"], "critic": ["policy", "image"]},
           "actor": {"class_name": "CNNModel", "hidden_dims": [32], "activation": "elu", "obs_normalization": True,
                     "cnn_cfg": {"output_channels": [4], "kernel_size": 3, "stride": 2},
                     "distribution_cfg": {"class_name": "GaussianDistribution"}},
           "critic": {"class_name": "CNNModel", "hidden_dims": [32], "activation": "elu", "obs_normalization": True,
                      "cnn_cfg": {"output_channels": [4], "kernel_size": 3, "stride": 2}}}
    env = PixelVecEnv(16)
    runner = OnPolicyRunner(env, cfg, log_dir=str(tmp_path), device="cpu")
    assert list(runner.alg.policy.obs_normalizers) == ["policy"]  # images stay raw, as rsl_rl's
    assert runner.alg.policy.model.actor.cnns["image"].output_dim == 4 * 3 * 3  # 7x7, k3, s2: 3x3
    with _quiet():
        runner.learn(2)
    other = OnPolicyRunner(PixelVecEnv(16), cfg, device="cpu")
    other.load(str(tmp_path / "model_1.pt"))
    obs = env.get_observations()
    torch.testing.assert_close(other.get_inference_policy()(obs), runner.get_inference_policy()(obs))
    runner.export_policy_to_jit(str(tmp_path / "x"))
    flat = torch.cat([obs["policy"], obs["image"].flatten(1)], dim=-1)  # obs_groups order
    torch.testing.assert_close(torch.jit.load(str(tmp_path / "x" / "policy.pt"))(flat),
                               runner.get_inference_policy()(obs))


def test_onnx_takes_one_obs_input_of_the_actors_groups_concatenated(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    cfg = {**CFG, "obs_groups": {"actor": ["policy", "critic"], "critic": ["policy", "critic"]}}
    env = WindyReach(16, "cpu", seed=0)
    runner = OnPolicyRunner(env, cfg, device="cpu")
    runner.export_policy_to_onnx(str(tmp_path))
    session = ort.InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs"] and [o.name for o in session.get_outputs()] == ["actions"]
    obs = env.get_observations()
    flat = torch.cat([obs["policy"], obs["critic"]], dim=-1)  # obs_groups order, not sorted
    got = session.run(None, {"obs": flat.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(got), runner.get_inference_policy()(obs), atol=1e-5, rtol=1e-5)


def test_tensorboard_gets_rsl_rls_tags(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runner = OnPolicyRunner(WindyReach(32, "cpu", seed=0), {**CFG, "num_steps_per_env": 120}, log_dir=str(tmp_path),
                            device="cpu")
    with _quiet():
        runner.learn(2)
    runner.close()
    tags = set(EventAccumulator(str(tmp_path)).Reload().Tags()["scalars"])
    for tag in ("Loss/value", "Loss/surrogate", "Loss/entropy", "Loss/learning_rate", "Policy/mean_std",
                "Perf/total_fps", "Perf/collection_time", "Perf/learning_time", "Train/mean_reward",
                "Train/mean_episode_length", "Episode/distance_to_goal"):
        assert tag in tags, sorted(tags)


def test_the_pixel_task_learns_with_the_cnn_model() -> None:
    """PixelReach with :class:`rlx.cnn.CNNActorCritic` from ``AlgorithmConfig``. Measured
    (seed 0, this config): return 5.1 after 20 iterations (optimal about 5.4, a uniform
    random policy about -0.1)."""
    from rlx import AlgorithmConfig
    from rlx.cnn import CNNActorCritic
    from rlx.envs import PixelReach

    algo = AlgorithmConfig(num_envs=64, horizon=32, model_cls=CNNActorCritic, seed=0, num_sgd_iters=4,
                           sgd_minibatch_size=512, vf_clip_param=None, optimizer_config={"lr": 1e-3},
                           model_config={"hiddens": [64], "activation_fn": "relu",
                                         "cnn": {"output_channels": [16, 16], "kernel_size": 3}}).build(PixelReach)
    returns = []
    for _ in range(20):
        returns.append(algo.collect()["episodes/return_mean"])
        algo.step()
    assert returns[0] < 2.0 and max(returns[-3:]) > 4.0, returns


def test_rsl_rl_checkpoints_play_and_resume_in_rlx(tmp_path: Path) -> None:
    """rsl_rl 5's own runner trains and saves; rlx's runner, built from the same cfg,
    loads it and acts exactly as rsl_rl's inference policy (without observation
    normalization: rsl_rl divides by std + 0.01, rlx by sqrt(var + 1e-8), so with it the
    actions differ by that)."""
    rsl_runner = pytest.importorskip("rsl_rl.runners")
    cfg = {**CFG, "obs_groups": {"actor": ["policy", "critic"], "critic": ["critic", "policy"]}}  # unsorted orders
    torch.manual_seed(0)
    with _quiet():
        theirs = rsl_runner.OnPolicyRunner(WindyReach(16, "cpu", seed=0), copy.deepcopy(cfg), log_dir=None,
                                           device="cpu")
        theirs.learn(3)
    theirs.save(str(tmp_path / "model_2.pt"))
    env = WindyReach(16, "cpu", seed=1)
    ours = OnPolicyRunner(env, cfg, device="cpu")
    ours.load(str(tmp_path / "model_2.pt"))
    assert ours.current_learning_iteration == 2
    obs = env.get_observations()
    with torch.no_grad():
        torch.testing.assert_close(ours.get_inference_policy()(obs), theirs.get_inference_policy()(obs),
                                   atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(ours.alg.critic(obs), theirs.alg.critic(obs), atol=1e-6, rtol=1e-6)
    with _quiet():
        ours.learn(1)  # resumes (Adam's moments restart: module docstring of rlx.runners.rsl_rl_checkpoint)


def test_an_rsl_rl_checkpoint_that_does_not_fit_is_refused_by_name(tmp_path: Path) -> None:
    runner = OnPolicyRunner(WindyReach(16, "cpu", seed=0), CFG, device="cpu")
    state = {"actor_state_dict": {"mlp.0.weight": torch.zeros(32, 99), "mlp.0.bias": torch.zeros(32)}, "iter": 1}
    torch.save(state, tmp_path / "bad.pt")
    with pytest.raises(Exception, match="'model.actor.0.weight' is \\[32, 99\\] in the checkpoint"):
        runner.load(str(tmp_path / "bad.pt"))


def test_rsl_rl_4s_alg_policy_for_the_exporters_written_against_it(tmp_path: Path) -> None:
    """Isaac Lab's play script reads ``runner.alg.policy`` as rsl_rl 4's ActorCritic: its
    exporters script a copy of ``policy.actor`` behind ``policy.actor_obs_normalizer``,
    size the ONNX input by ``policy.actor[0].in_features``, and the play loop calls
    ``policy.reset(dones)``. The same steps here, checked against the inference policy."""
    cfg = copy.deepcopy({**CFG, "obs_groups": {"actor": ["policy", "critic"], "critic": ["policy", "critic"]}})
    cfg["actor"]["obs_normalization"] = cfg["critic"]["obs_normalization"] = True
    env = WindyReach(16, "cpu", seed=0)
    runner = OnPolicyRunner(env, cfg, device="cpu")
    with _quiet():
        runner.learn(2)  # moves the normalizer's statistics off their initial values
    policy = runner.alg.policy
    assert policy.is_recurrent is False and policy.actor[0].in_features == 4 + 3
    assert policy.state_dict().keys() == runner.alg.algorithm.policy.state_dict().keys()
    exported = torch.jit.script(torch.nn.Sequential(copy.deepcopy(policy.actor_obs_normalizer),
                                                    copy.deepcopy(policy.actor)))
    obs = env.get_observations()
    flat = torch.cat([obs["policy"], obs["critic"]], dim=-1)  # obs_groups order
    torch.testing.assert_close(exported(flat), runner.get_inference_policy()(obs))
    policy.reset(torch.ones(16))
    torch.testing.assert_close(policy.act_inference(obs), runner.get_inference_policy()(obs))
    recurrent = OnPolicyRunner(env, {**CFG, "actor": {**RNN, "distribution_cfg": {}}, "critic": RNN}, device="cpu")
    assert recurrent.alg.policy.is_recurrent and not hasattr(recurrent.alg.policy, "actor")


def test_one_line_switches_code_that_builds_rsl_rls_runners_itself(tmp_path: Path) -> None:
    """Isaac Lab's newest backend builds the runner in a module that imported rsl_rl's
    names (``create_rsl_rl_runner``); ``use_rlx_runners()`` makes them rlx's, for a
    module imported before it and one imported after."""
    import importlib
    import sys

    pytest.importorskip("rsl_rl")
    import rlx.runners

    source = ("from rsl_rl.runners import DistillationRunner, OnPolicyRunner\n"
              "def create_runner(env, cfg):\n    return OnPolicyRunner(env, cfg, log_dir=None, device='cpu')\n")
    (tmp_path / "backend_before.py").write_text(source)
    (tmp_path / "backend_after.py").write_text(source)
    sys.path.insert(0, str(tmp_path))
    try:
        before = importlib.import_module("backend_before")
        restore = rlx.runners.use_rlx_runners()
        try:
            after = importlib.import_module("backend_after")
            for backend in (before, after):
                runner = backend.create_runner(WindyReach(16, "cpu", seed=0), copy.deepcopy(CFG))
                assert isinstance(runner, rlx.runners.OnPolicyRunner)
                assert backend.DistillationRunner is rlx.runners.DistillationRunner
            import rsl_rl.runners.on_policy_runner as home

            assert home.OnPolicyRunner is not rlx.runners.OnPolicyRunner  # rsl_rl's own module keeps its class
        finally:
            restore()
        assert before.OnPolicyRunner is not rlx.runners.OnPolicyRunner
        import rsl_rl.runners

        assert rsl_rl.runners.OnPolicyRunner is home.OnPolicyRunner
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("backend_before", "backend_after"):
            sys.modules.pop(name, None)


class EnvStateRunner(OnPolicyRunner):
    """A runner subclass written against rsl_rl's (mjlab's pattern): ``save`` adds the
    env's state to ``infos``; ``load`` reads the file itself and calls ``alg.load``."""

    def save(self, path, infos=None):
        super().save(path, {**(infos or {}), "env_state": {"counter": 7}})

    def load(self, path, load_cfg=None, strict=True, map_location=None):
        loaded = torch.load(path, map_location=map_location, weights_only=False)
        if self.alg.load(loaded, load_cfg, strict):
            self.current_learning_iteration = loaded["iter"]
        return loaded["infos"]


def test_a_runner_subclass_written_against_rsl_rls_save_and_load(tmp_path: Path) -> None:
    runner = EnvStateRunner(WindyReach(16, "cpu", seed=0), CFG, log_dir=str(tmp_path), device="cpu")
    with _quiet():
        runner.learn(2)
    other = EnvStateRunner(WindyReach(16, "cpu", seed=1), CFG, device="cpu")
    assert other.load(str(tmp_path / "model_1.pt"))["env_state"] == {"counter": 7}
    assert other.current_learning_iteration == 1
    for a, b in zip(runner.alg.policy.state_dict().values(), other.alg.policy.state_dict().values()):
        assert torch.equal(a, b)


def test_rlx_train_takes_a_recurrent_rsl_rl_cfg_and_names_it(tmp_path: Path) -> None:
    import yaml

    from rlx.run.checkpoint import latest_checkpoint, load_checkpoint
    from rlx.run.cli import main

    run_config = tmp_path / "windy.yaml"
    run_config.write_text("env: rlx.envs:RslRlVecEnv\nenv_kwargs: {make_env: rlx.examples.windy_reach:WindyReach}\n"
                          "algorithm: ppo\nconfig: {num_envs: 16, device: cpu}\ntrainer: {max_iterations: 9, eval_every: 0}\n")
    agent = tmp_path / "agent.yaml"
    agent.write_text(yaml.safe_dump({**CFG, "max_iterations": 2, "save_interval": 1, "actor": {**RNN, "distribution_cfg": {}},
                                     "critic": RNN}))
    with _quiet():
        assert main(["train", str(run_config), "--rsl-rl-cfg", str(agent), "--run-dir", str(tmp_path / "run"),
                     "--threads", "1"]) == 0
    assert load_checkpoint(latest_checkpoint(tmp_path / "run"))["config"]["algorithm"] == "recurrent_ppo"
