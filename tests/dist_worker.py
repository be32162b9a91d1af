"""A torchrun worker for tests/test_distributed.py (also runs as a single process).

    python tests/dist_worker.py MODE TOTAL_ENVS OUT
        (MODE: ppo, npg, recurrent_ppo, rsl_rl_groups, ppo_symmetry, ppo_kl_stop, ppo_seeds, npg_seeds, ppo_sweep,
        ppo_rnd, ppo_compiled, npg_compiled, seeds_done, pbt, make_teacher, distill, mismatch, mismatch_env_kwargs, die, running_stats;
        or several, comma-separated, run one after the other, each writing OUT.MODE)
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDict
from torchrl.data import Categorical, Unbounded

from rlx import AlgorithmConfig, NPGConfig, RecurrentAlgorithmConfig
from rlx.core import distributed as rdist
from rlx.env import Env


class IndexedWalker(Env):
    """Deterministic: sub-env g (global index across ranks) walks toward target g % 5 - 2.

    Episodes last g % 4 + 3 steps; even g terminate, odd g truncate. No RNG anywhere, so
    2 ranks x B/2 envs see exactly the transitions of 1 rank x B envs. With ``seeds = S``
    the S blocks of rows are the seeds' (rlx.members), and g counts within each seed's
    envs across ranks: seed i sees the same envs on 1 and on 2 ranks.
    """

    seeds = 1

    def __init__(self, num_envs: int, /, horizon: int | None = None, *, device: Any = "cpu") -> None:
        super().__init__(num_envs, horizon, device=device)
        self.observation_spec = Unbounded(shape=(2,), device=self.device)
        self.action_spec = Categorical(2, device=self.device)
        per_seed = num_envs // self.seeds
        j = torch.arange(num_envs, device=self.device)
        g = (j // per_seed) * per_seed * rdist.world_size() + rdist.rank() * per_seed + j % per_seed
        self.target = (g % 5 - 2).float()
        self.length = g % 4 + 3
        self.parity = g % 2
        self.pos = torch.zeros(num_envs, device=self.device)
        self.t = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    def _obs(self) -> torch.Tensor:
        return torch.stack([self.pos, self.target], -1)

    def reset(self, *, config=None):
        self.pos.zero_()
        self.t.zero_()
        return self._obs()

    def step(self, actions):
        self.pos += 2.0 * actions.float() - 1.0
        self.t += 1
        rewards = -(self.pos - self.target).abs()
        done = self.t >= self.length
        final = self._obs()
        self.pos = torch.where(done, 0.0, self.pos)
        self.t = torch.where(done, 0, self.t)
        return TensorDict(
            {"obs": self._obs(), "rewards": rewards.unsqueeze(-1), "terminated": (done & (self.parity == 0)).unsqueeze(-1),
             "truncated": (done & (self.parity == 1)).unsqueeze(-1), "final_obs": final},
            batch_size=[self.num_envs],
        )


class IndexedWalkerVecEnv:
    """:class:`IndexedWalker` as an rsl_rl VecEnv (TensorDict groups): ``policy`` holds the
    position and target, ``critic`` adds the steps left, which only the critic reads;
    ``extras["log"]`` reports the mean position, and ``time_outs`` the truncations. One
    continuous action per sub-env: its step, clamped to [-1, 1]."""

    def __init__(self, num_envs: int, device: Any) -> None:
        self.walker = IndexedWalker(num_envs, device=device)
        self.num_envs, self.num_actions, self.device = num_envs, 1, torch.device(device)
        self.max_episode_length = 6

    def _groups(self) -> TensorDict:
        w = self.walker
        left = (w.length - w.t).float().unsqueeze(-1)
        return TensorDict({"policy": w._obs(), "critic": torch.cat([w._obs(), left], -1)}, batch_size=[self.num_envs])

    def get_observations(self) -> TensorDict:
        return self._groups()

    def reset(self) -> tuple[TensorDict, dict]:
        self.walker.reset()
        return self._groups(), {}

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        # Continuous moves (the walker maps a in [0, 1] to a step of 2a - 1): a sign test
        # would let float rounding, which differs between 1 and 2 ranks, flip an action.
        out = self.walker.step((actions.squeeze(-1).clamp(-1, 1) + 1) / 2)
        dones = (out["terminated"] | out["truncated"]).squeeze(-1)
        extras = {"time_outs": out["truncated"].squeeze(-1), "log": {"/position": self.walker.pos.mean()}}
        return self._groups(), out["rewards"].squeeze(-1), dones, extras


class RankZeroMarksSeedOneDone:
    """A stop condition that holds for seed 1 on rank 0 alone, after iteration 2 (as an
    evaluation, which rank 0 alone runs, would decide)."""

    def __call__(self, trainer, metrics):
        if rdist.rank() == 0 and trainer.iteration >= 2:
            trainer.algorithm.members.mark_done([1])
        return None

    def state_dict(self):
        return {}

    def load_state_dict(self, state) -> None:
        pass


def seeds_done(common: dict, out: str, rank: int) -> None:
    """2 seeds under a Trainer for 5 iterations: every rank must stop updating seed 1
    when rank 0's condition marks it done, and keep seed 0 going alike."""
    from rlx.run.trainer import Trainer, TrainerConfig

    IndexedWalker.seeds = 2
    algo = AlgorithmConfig(**common, num_seeds=2, optimizer_config={"lr": 1e-2}).build(IndexedWalker)
    trainer = Trainer(algo, TrainerConfig(max_iterations=5, progress=False), stop_conditions=[RankZeroMarksSeedOneDone()])
    trainer.run()
    torch.save({"params": [p.detach() for p in algo.policy.parameters()], "done": algo.members.done.tolist(),
                "iteration": trainer.iteration}, f"{out}.rank{rank}")


def pbt(common: dict, out: str, rank: int) -> None:
    """4 members under PBT for 6 iterations, ranked on an evaluation rank 0 alone runs:
    every rank must still copy and perturb alike."""
    from rlx.run.trainer import Trainer, TrainerConfig

    IndexedWalker.seeds = 4
    algo = AlgorithmConfig(**common, num_seeds=4, optimizer_config={"lr": 1e-2},
                           member_hparams={"lr": [1e-3, 3e-3, 1e-2, 3e-2]}).build(IndexedWalker)
    trainer = Trainer(algo, TrainerConfig(max_iterations=6, progress=False, tensorboard=False,
                                          eval_every=2, eval_num_envs=4, eval_episodes=4,
                                          pbt={"members": 4, "every": 2, "hparams": ["lr"], "metric": "eval/return_mean"}))
    trainer.run()
    torch.save({"params": [p.detach() for p in algo.policy.parameters()], "lineage": trainer.pbt.lineage,
                "lrs": algo.member_values("lr")}, f"{out}.rank{rank}")


def negate(obs: TensorDict, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor]:
    """A mirror for ``ppo_symmetry``: an involution (the test needs the arithmetic, not the
    walker's true symmetry)."""
    return obs.apply(torch.neg), -actions


#: The natural step compared in float64 with conjugate gradient converged: ten float32
#: iterations amplify the ranks' reordered sums ~100x an iteration late in the solve.
NPG_FLOAT64 = {"cg_iters": 40, "cg_residual_tol": 0.0}
FLOAT64_MODES = ("npg", "npg_seeds")


def compiled(mode: str, common: dict, out: str, rank: int) -> None:
    """``compile`` (the programs, the all-reduces inside them) against the same algorithm
    eager, on these ranks, in float64: PPO (``ppo_compiled``: the whole update, the phases
    and the T loop, with the KL early stop and RND) or NPG (``npg_compiled``: the natural
    step with its gradient, Fisher-vector products and line search reduced over the
    ranks, and the critic's minibatches). Each rank saves both runs' parameters and
    statistics, and the compiled run's fallbacks."""
    if mode == "npg_compiled":
        # CG converged in 6 iterations (damping 30 above the Fisher's largest eigenvalue,
        # tests/algorithms/test_npg.py; the squared residual ends near 5e-17, 5e-12 after 5):
        # the two programs then differ by rounding, not by CG's amplification of it. The
        # program unrolls the iterations: fewer compile faster.
        cls, config = NPGConfig, dict(common, fvp_subsample=1.0, line_search=True, optim_critic_iters=2, damping=30.0,
                                      cg_iters=6, cg_residual_tol=0.0)
    else:
        cls, config = AlgorithmConfig, dict(common, num_sgd_iters=3, shuffle_minibatches=False,
                                            optimizer_config={"lr": 1e-2}, target_kl_div=2e-3,
                                            rnd={"weight": 0.5, "predictor_hiddens": [16], "target_hiddens": [16],
                                                 "embedding_dim": 4, "normalize_state": True})
    runs = {}
    with _compile_in_turn(out, rank):
        for compile_ in (False, True):
            algo = cls(**config, compile=compile_).build(IndexedWalker)
            rnd = getattr(algo, "rnd", None)
            for module, optimizer in ((algo.policy, algo.optimizer), *(((rnd, rnd.optimizer),) if rnd else ())):
                module.double()
                for state in optimizer.state.values():  # made at build: the program holds these tensors
                    for key, value in state.items():
                        if key != "step":
                            value.data = value.data.double()
            for _ in range(2):
                stats = algo.collect(deterministic=True)
                stats.update(algo.step())
            runs[compile_] = {"params": [p.detach() for p in [*algo.policy.parameters(), *(rnd.predictor.parameters() if rnd else ())]],
                              "stats": stats, "lr": algo.config.optimizer_kwargs["lr"],
                              "fallback": getattr(algo, "compile_fallback", None) or getattr(algo, "critic_fallback", None),
                              "programs": len(getattr(algo, "phase_programs", getattr(algo, "warm_programs", ())))}
    torch.save(runs, f"{out}.rank{rank}")


@contextlib.contextmanager
def _compile_in_turn(out: str, rank: int, timeout_s: float = 600.0) -> Iterator[None]:
    """Inside the block, each rank compiles a frame after the rank before it has compiled
    that frame: the ranks trace the same programs, so a later rank finds inductor's output
    in the shared on-disk cache (the FX graph and AOTAutograd caches) and pays dynamo's
    trace, not inductor's compile and g++ again. Rank ``r`` marks the end of its ``k``-th
    compile with the file ``{out}.compiled.r.k``; rank ``r + 1`` waits for it before
    starting its own ``k``-th. (tests/test_distributed.py's compiled test took 95 s of CPU
    with the ranks compiling side by side, 74 s in turn.)"""
    from torch._dynamo.callback import callback_handler

    started, ended = [0], [0]

    def wait(_: Any) -> None:
        started[0] += 1
        if rank == 0:
            return
        marker, deadline = f"{out}.compiled.{rank - 1}.{started[0]}", time.monotonic() + timeout_s
        while not os.path.exists(marker):
            if time.monotonic() > deadline:
                raise TimeoutError(f"rank {rank}: rank {rank - 1} did not compile frame {started[0]} in {timeout_s} s")
            time.sleep(0.05)

    def mark(_: Any) -> None:
        ended[0] += 1
        with open(f"{out}.compiled.{rank}.{ended[0]}", "w"):
            pass

    callback_handler.register_start_callback(wait)
    callback_handler.register_end_callback(mark)
    try:
        yield
    finally:
        callback_handler.remove_start_callback(wait)
        callback_handler.remove_end_callback(mark)


def main() -> None:
    mode, total, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    rdist.init_from_env(device_type="cpu")
    if "," in mode:  # several modes, one after the other in this process: each writes {out}.{mode}
        for one in mode.split(","):
            run(one, total, f"{out}.{one}")
    else:
        run(mode, total, out)
    if rdist.is_distributed():
        torch.distributed.destroy_process_group()


def run(mode: str, total: int, out: str) -> None:
    """One mode (see the module's docstring), in a process group already set up."""
    world, rank = rdist.world_size(), rdist.rank()
    IndexedWalker.seeds = 1  # a mode with members sets its own
    if mode == "running_stats":
        # 10 samples on rank 0, 3 on rank 1; only the syncing instance merges them.
        from rlx.core.normalization import RunningMeanStd

        synced, local = RunningMeanStd((2,), sync_ranks=True), RunningMeanStd((2,))
        x = torch.arange(2 * (10 - 7 * rank), dtype=torch.float32).view(-1, 2) + 100 * rank
        synced.update(x)
        local.update(x)
        torch.save({"synced": synced.state_dict(), "local": local.state_dict()}, f"{out}.rank{rank}")
        return
    common = dict(num_envs=total // world, horizon=8, device="cpu", seed=0, gamma=0.9, normalize_obs=True,
                  model_config={"hiddens": [16]})
    if mode == "seeds_done":
        seeds_done(common, out, rank)
        return
    if mode == "pbt":
        pbt(common, out, rank)
        return
    if mode in ("ppo_compiled", "npg_compiled"):
        compiled(mode, common, out, rank)
        return
    if mode == "make_teacher":  # one process: a PPO teacher's run directory for "distill"
        from rlx.run.trainer import Trainer, TrainerConfig

        teacher = AlgorithmConfig(**common, optimizer_config={"lr": 1e-2}).build(IndexedWalker)
        Trainer(teacher, TrainerConfig(max_iterations=2, progress=False, tensorboard=False), run_dir=out).run()
        return
    try:
        if mode == "ppo":
            config = AlgorithmConfig(**common, num_sgd_iters=3, shuffle_minibatches=False, optimizer_config={"lr": 1e-2})
        elif mode == "recurrent_ppo":
            config = RecurrentAlgorithmConfig(
                **{**common, "model_config": {"hiddens": [16], "hidden_size": 8}}, seq_len=4, num_sgd_iters=3,
                shuffle_minibatches=False, optimizer_config={"lr": 1e-2},
            )
        elif mode == "ppo_kl_stop":  # whole-buffer minibatches: the same data on 1 and 2 ranks
            config = AlgorithmConfig(**common, num_sgd_iters=8, shuffle_minibatches=False, optimizer_config={"lr": 3e-2},
                                     target_kl_div=2e-3)
        elif mode == "rsl_rl_groups":  # the rsl_rl adapter, with a critic reading privileged state
            # An entropy bonus gives the log-std a true gradient: with deterministic actions its
            # policy gradient is exactly 0, and Adam would scale rounding noise to a full step.
            config = AlgorithmConfig(**common, num_sgd_iters=3, shuffle_minibatches=False, optimizer_config={"lr": 1e-2},
                                     entropy_coeff=0.01, obs_groups={"actor": ["policy"], "critic": ["policy", "critic"]})
        elif mode == "distill":  # the student's gradient averaged over the ranks, the teacher on every rank
            from rlx import DistillationConfig

            config = DistillationConfig(**common, teacher=os.environ["RLX_TEACHER"], num_sgd_iters=2,
                                        optimizer_config={"lr": 1e-2})
        elif mode == "npg":  # float64 with CG converged (see NPG_FLOAT64 in tests/members/test_member_hparams.py)
            config = NPGConfig(**common, fvp_subsample=1.0, line_search=True, optim_critic_iters=2, **NPG_FLOAT64)
        elif mode == "ppo_seeds":  # 2 seeds replicated on every rank, each data-parallel; per-seed KL stop
            IndexedWalker.seeds = 2
            config = AlgorithmConfig(**common, num_seeds=2, num_sgd_iters=3, shuffle_minibatches=False,
                                     optimizer_config={"lr": 3e-2}, target_kl_div=2e-3)
        elif mode == "ppo_rnd":  # the predictor's gradient averaged over the ranks, its state normalized over all
            config = AlgorithmConfig(**common, num_sgd_iters=3, shuffle_minibatches=False, optimizer_config={"lr": 1e-2},
                                     rnd={"weight": 0.5, "predictor_hiddens": [16], "target_hiddens": [16],
                                          "embedding_dim": 4, "normalize_state": True})
        elif mode == "ppo_symmetry":  # each rank mirrors its own minibatch rows; the mirror loss averaged too
            # On the VecEnv walker (continuous actions, which the mirror loss compares).
            config = AlgorithmConfig(**common, num_sgd_iters=3, shuffle_minibatches=False, optimizer_config={"lr": 1e-2},
                                     entropy_coeff=0.01, obs_groups={"actor": ["policy"], "critic": ["policy", "critic"]},
                                     symmetry_fn=negate, symmetry_augment=True, mirror_loss_coeff=0.5)
        elif mode == "ppo_sweep":  # 2 members that differ in hyperparameters, each data-parallel
            IndexedWalker.seeds = 2
            config = AlgorithmConfig(**common, num_seeds=2, num_sgd_iters=3, shuffle_minibatches=False,
                                     optimizer_config={"lr": 3e-2}, target_kl_div=2e-3,
                                     member_hparams={"lr": [3e-2, 1e-2], "entropy_coeff": [0.0, 0.02],
                                                     "clip_param": [0.2, 0.1], "gamma": [0.95, 0.8],
                                                     "target_kl_div": [2e-3, 5e-3]})
        elif mode == "npg_seeds":
            IndexedWalker.seeds = 2
            config = NPGConfig(**common, num_seeds=2, fvp_subsample=1.0, line_search=True, optim_critic_iters=2,
                               normalize_rewards=True, **NPG_FLOAT64)
        elif mode == "mismatch":
            config = AlgorithmConfig(**{**common, "num_envs": 4 + rank})
        else:  # die, mismatch_env_kwargs
            config = AlgorithmConfig(**common)
        env_cls = IndexedWalker
        if mode in ("rsl_rl_groups", "ppo_symmetry"):
            from rlx.envs import RslRlVecEnv

            env_cls = RslRlVecEnv.factory(IndexedWalkerVecEnv)
        if mode == "mismatch_env_kwargs":  # the same env class, bound to other arguments
            from rlx.config.run import env_factory

            env_cls = env_factory("rlx.envs:CueRecall", {"delay": 4 + 4 * rank})
        algo = config.build(env_cls)
        if mode in FLOAT64_MODES:
            algo.policy.double()
        if mode == "die":
            if rank == 1:
                os._exit(3)
            for _ in range(1000):
                algo.collect()
                algo.step()
            return
        for _ in range(2):
            stats = algo.collect(deterministic=True)
            stats.update(algo.step())
    except ValueError as e:
        with open(f"{out}.rank{rank}", "w") as f:
            f.write(str(e))
        raise SystemExit(2)
    if rank == 0:
        torch.save({"params": [p.detach() for p in algo.policy.parameters()], "stats": stats,
                    "env_steps": algo.env_steps}, out)
    if mode == "ppo_kl_stop":  # every rank's own view of the update
        torch.save({"params": [p.detach() for p in algo.policy.parameters()], "stats": stats}, f"{out}.rank{rank}")


if __name__ == "__main__":
    main()
