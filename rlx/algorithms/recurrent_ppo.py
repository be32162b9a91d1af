"""PPO with a recurrent policy: hidden states that carry across steps and collects and
restart exactly where a sub-env's episode ended.

Collect runs the model one step at a time and stores, per column ``t``, the state before
step ``t`` (``hidden``) and whether step ``t`` begins an episode (``resets``: the
previous step was terminated or truncated, or the env was reset). The model applies the
reset itself, as a masked multiply, so the T loop never branches on a tensor. Column
``T``'s state and flag are carried into the next collect, so episodes longer than ``T``
keep their memory.

The update trains on sequences of ``seq_len`` steps cut from the ``[B, T]`` rollout
(``T / seq_len`` per env), each started from the state stored when it was collected,
with resets inside a sequence applied as in collect (truncated backprop through time).
With ``burn_in = W``, a sequence that has ``W`` collected steps before it in the rollout
first runs them without gradient under the current parameters, refreshing its stale
stored state (Kapturowski et al., 2019, R2D2); the first sequences of the rollout have
none and keep the stored state. Minibatches are whole sequences; GAE, normalizers, AMP,
KL early stopping and schedules are PPO's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase
from torch import Tensor

from rlx.algorithms.ppo import PPO
from rlx.buffer import ACTIONS, ADVANTAGES, HIDDEN, LOGP, RESETS, RETURNS, VALUES
from rlx.env import FINAL_OBS, OBS, EnvOutputError
from rlx.policy import ActOutput, EvalOutput, RecurrentPolicy, flatten_time

if TYPE_CHECKING:
    from rlx.config import RecurrentAlgorithmConfig
    from rlx.env import EnvFactory

__all__ = ["RecurrentPPO"]

Obs = Tensor | TensorDictBase

# Entries of the training batch used only with burn-in.
_BURN_OBS, _BURN_RESETS, _BURN_HIDDEN, _BURN_VALID = "burn_obs", "burn_resets", "burn_hidden", "burn_valid"


def _sequences(x: Obs, num_sequences: int, length: int) -> Obs:
    """``[B, K * L, ...]`` -> ``[B * K, L, ...]`` (a tensor, or a TensorDict's batch dims)."""
    return x.reshape(num_sequences, length, *x.shape[2:])


class RecurrentPPO(PPO):
    """PPO with a recurrent policy; build it with ``RecurrentAlgorithmConfig(...).build(env_cls)``."""

    config: RecurrentAlgorithmConfig
    policy: RecurrentPolicy
    policy_cls = RecurrentPolicy

    def __init__(self, env_cls: EnvFactory, config: RecurrentAlgorithmConfig) -> None:
        super().__init__(env_cls, config)
        self.seq_len = config.sequence_length
        self.burn_in = config.burn_in

    # -- build-time checks and buffer ------------------------------------------------

    def _initial_state(self) -> Tensor:
        with torch.no_grad():
            return self.policy.initial_state(self.num_envs)

    def _probe_model(self, obs: Obs) -> tuple[Tensor, Tensor]:
        B = self.num_envs
        state = self._initial_state()
        if not isinstance(state, Tensor) or state.shape[:1] != (B,):
            got = list(state.shape) if isinstance(state, Tensor) else type(state).__name__
            raise EnvOutputError(f"model initial_state({B}) returned {got}, expected a tensor [{B}, *state]")
        resets = torch.ones(B, 1, dtype=torch.bool, device=self.device)
        outputs = self.policy.sequence_forward(obs.unsqueeze(1), state, resets)
        if not isinstance(outputs, tuple) or len(outputs) != 3:
            raise EnvOutputError("recurrent model forward(obs, state, resets) must return (dist_params, values, state)")
        params, values, new_state = outputs
        if new_state.shape != state.shape:
            raise EnvOutputError(
                f"recurrent model output 'state' has shape {list(new_state.shape)}, expected {list(state.shape)} "
                "(the shape of initial_state)"
            )
        for name, x, width in (("dist_params", params, sum(self.policy.num_params)), ("values", values, 1)):
            if tuple(x.shape) != (B, 1, width):
                raise EnvOutputError(
                    f"recurrent model output '{name}' has shape {list(x.shape)}, expected {[B, 1, width]} "
                    "for obs [B, L=1, *obs]"
                )
        return params[:, 0], values[:, 0]

    def _probe_act(self, obs: Obs) -> ActOutput:
        resets = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        return self.policy.act_step(obs, self._initial_state(), resets)[0]

    def _allocate(self, obs_spec: Any, action_spec: Any) -> None:
        super()._allocate(obs_spec, action_spec)
        B, T = self.num_envs, self.horizon
        state = self._initial_state()
        buf = self.buffer
        buf.set(HIDDEN, torch.zeros(B, T + 1, *state.shape[1:], dtype=torch.float32, device=self.device))
        buf.set(RESETS, torch.zeros(B, T + 1, 1, dtype=torch.bool, device=self.device))
        self._hidden_cols = [buf.get(HIDDEN)[:, t] for t in range(T + 1)]
        self._reset_cols = [buf.get(RESETS)[:, t] for t in range(T + 1)]
        self._hidden_cols[T].copy_(state)
        self._reset_cols[T].fill_(True)
        self._no_resets = torch.zeros(B * T, dtype=torch.bool, device=self.device)

    # -- collect hooks (inside or right after the T loop: no host syncs) -------------------

    def _begin_collect(self, reset_all: bool) -> None:
        T = self.horizon
        if reset_all:
            self._hidden_cols[0].copy_(self._initial_state())
            self._reset_cols[0].fill_(True)
        else:  # carry the live state and the last step's episode ends over
            self._hidden_cols[0].copy_(self._hidden_cols[T])
            self._reset_cols[0].copy_(self._reset_cols[T])

    def _ended(self, t: int) -> Tensor:
        """``[B, 1]`` bool: step ``t`` ended an episode."""
        return self._terminated_cols[t] | self._truncated_cols[t]

    def _act(self, t: int, obs: Obs, deterministic: bool) -> ActOutput:
        if t > 0:
            self._reset_cols[t].copy_(self._ended(t - 1))
        act, state = self.policy.act_step(obs, self._hidden_cols[t], self._reset_cols[t], deterministic=deterministic)
        self._hidden_cols[t + 1].copy_(state)
        return act

    def _bootstrap_values(self, obs: Obs) -> Tensor:
        T = self.horizon
        self._reset_cols[T].copy_(self._ended(T - 1))
        return self.policy.value_step(obs, self._hidden_cols[T], self._reset_cols[T])

    def _final_value_inputs(self) -> tuple[Any, tuple[Obs, ...]]:
        # The episode that ended at step t would have continued from the state after
        # step t, before any reset: column t + 1 of ``hidden``.
        T = self.horizon

        def values(obs: Obs, states: Tensor) -> Tensor:
            return self.policy.value_step(obs, states, self._no_resets[: states.shape[0]])

        return values, (self.buffer.get(FINAL_OBS)[:, :T], self.buffer.get(HIDDEN)[:, 1 : T + 1])

    # -- the update on sequences ----------------------------------------------------------

    def _unit_samples(self) -> int:
        """Samples per unit: one sequence, ``seq_len``."""
        return self.config.sequence_length

    def _num_units(self) -> tuple[int, int]:
        """``(sequences in the rollout, sequences per minibatch)``."""
        L = self.seq_len
        return self.num_envs * (self.horizon // L), self.config.minibatch_size // L

    def _training_batch(self) -> dict[str, Obs]:
        B, T, L, W = self.num_envs, self.horizon, self.seq_len, self.burn_in
        K = T // L
        S = B * K
        buf = self.buffer
        batch: dict[str, Obs] = {
            key: _sequences(buf.get(key)[:, :T], S, L)  # [B, T, ...] -> [B*K, L, ...]
            for key in (OBS, ACTIONS, LOGP, VALUES, ADVANTAGES, RETURNS)
        }
        batch[RESETS] = _sequences(buf.get(RESETS)[:, :T], S, L).squeeze(-1)  # [B*K, L]
        hidden = buf.get(HIDDEN)
        batch[HIDDEN] = hidden[:, 0:T:L].reshape(S, *hidden.shape[2:])  # state before each sequence
        if self.config.normalize_advantages:
            batch[ADVANTAGES] = self._normalized_advantages(batch[ADVANTAGES])
        if W:
            starts = torch.arange(K, device=self.device) * L  # [K]
            first = (starts - W).clamp(min=0)  # [K]
            window = first.unsqueeze(1) + torch.arange(W, device=self.device)  # [K, W], all < T
            burn_obs = buf.get(OBS)[:, window]  # [B, K, W, *obs]
            batch[_BURN_OBS] = burn_obs.reshape(S, W, *burn_obs.shape[3:])  # [B*K, W, *obs]
            batch[_BURN_RESETS] = buf.get(RESETS)[:, window].reshape(S, W)  # [B, K, W, 1] -> [B*K, W]
            batch[_BURN_HIDDEN] = hidden[:, first].reshape(S, *hidden.shape[2:])
            batch[_BURN_VALID] = (starts >= W).expand(B, K).reshape(S)  # sequences with W steps before them
        return batch

    def _evaluate_minibatch(self, mb: dict[str, Obs]) -> tuple[EvalOutput, dict[str, Obs]]:
        state = mb[HIDDEN]
        if self.burn_in:
            with torch.no_grad():
                _, _, burned = self.policy.sequence_forward(mb[_BURN_OBS], mb[_BURN_HIDDEN], mb[_BURN_RESETS])
            valid = mb[_BURN_VALID].view(-1, *([1] * (state.dim() - 1)))
            state = torch.where(valid, burned.to(state.dtype), state)
        out = self.policy.evaluate_sequences(mb[OBS], mb[ACTIONS], state, mb[RESETS])
        rollout = {key: mb[key].reshape(-1, 1) for key in (LOGP, VALUES, ADVANTAGES, RETURNS)}  # [S, L, 1] -> [S*L, 1]
        return out, rollout

    # -- state ------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """PPO's state plus the live hidden states and reset flags of every sub-env."""
        state = super().state_dict()
        if self.buffer is not None:
            T = self.horizon
            state["recurrent"] = {"hidden": self._hidden_cols[T].clone(), "resets": self._reset_cols[T].clone()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        recurrent = state.get("recurrent")
        if self.world_size == 1 and recurrent is not None:
            T = self.horizon
            self._hidden_cols[T].copy_(recurrent["hidden"])
            self._reset_cols[T].copy_(recurrent["resets"])
