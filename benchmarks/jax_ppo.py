"""A whole-program JAX PPO on CartPole, PureJaxRL's design, as rlx's peer in ``vs_jax.py``.

The whole training run is one ``jax.jit``-compiled function: the envs are ``vmap``-ed
pure functions, the T-step rollout, GAE's reverse recursion, the epochs and the
minibatches are ``lax.scan`` loops, and XLA fuses what it can. The work matches an rlx
PPO iteration: CartPole-v1 dynamics (gymnasium's Euler integrator, 500-step
truncation, auto-reset), separate 64x64 tanh actor and critic, clipped surrogate, value
loss without clipping, entropy bonus, advantages normalized per minibatch-free batch,
Adam with the gradient clipped to a global norm. (Truncation is bootstrapped from the
reset observation's value here, as PureJaxRL does; rlx bootstraps from ``V(final_obs)``:
the same arithmetic, a different value input.)

Needs the ``jax``, ``flax`` and ``optax`` benchmark extras (``pip install -e '.[jax]'``);
nothing in ``rlx`` imports this file.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn
from ppo_settings import PPOSettings

__all__ = ["ActorCritic", "PPOSettings", "make_train", "optimizer", "ppo_loss"]


# -- CartPole-v1 as pure functions -----------------------------------------------------------

GRAVITY, CART_MASS, POLE_MASS, HALF_LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
X_LIMIT, THETA_LIMIT, MAX_STEPS = 2.4, 12 * 2 * math.pi / 360, 500


class EnvState(NamedTuple):
    physics: jnp.ndarray  # [4]: x, x_dot, theta, theta_dot
    t: jnp.ndarray  # steps into the episode
    episode_return: jnp.ndarray


def env_reset(key: jax.Array) -> EnvState:
    return EnvState(jax.random.uniform(key, (4,), minval=-0.05, maxval=0.05), jnp.int32(0), jnp.float32(0.0))


def env_step(key: jax.Array, state: EnvState, action: jnp.ndarray):
    x, x_dot, theta, theta_dot = state.physics
    force = jnp.where(action == 1, FORCE, -FORCE)
    cos, sin = jnp.cos(theta), jnp.sin(theta)
    total_mass, pole_ml = CART_MASS + POLE_MASS, POLE_MASS * HALF_LENGTH
    temp = (force + pole_ml * theta_dot**2 * sin) / total_mass
    theta_acc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - POLE_MASS * cos**2 / total_mass))
    x_acc = temp - pole_ml * theta_acc * cos / total_mass
    physics = jnp.stack([x + TAU * x_dot, x_dot + TAU * x_acc, theta + TAU * theta_dot, theta_dot + TAU * theta_acc])
    t = state.t + 1
    terminated = (jnp.abs(physics[0]) > X_LIMIT) | (jnp.abs(physics[2]) > THETA_LIMIT)
    done = terminated | (t >= MAX_STEPS)
    episode_return = state.episode_return + 1.0
    fresh = env_reset(key)
    next_state = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), fresh, EnvState(physics, t, episode_return))
    # (obs after auto-reset, reward, terminated, done, the finished episode's return or NaN)
    return next_state, next_state.physics, jnp.float32(1.0), terminated, done, jnp.where(done, episode_return, jnp.nan)


# -- networks --------------------------------------------------------------------------------


class ActorCritic(nn.Module):
    actions: int
    hidden: int

    @nn.compact
    def __call__(self, obs):
        a = nn.tanh(nn.Dense(self.hidden)(obs))
        a = nn.tanh(nn.Dense(self.hidden)(a))
        logits = nn.Dense(self.actions)(a)
        v = nn.tanh(nn.Dense(self.hidden)(obs))
        v = nn.tanh(nn.Dense(self.hidden)(v))
        return logits, nn.Dense(1)(v).squeeze(-1)


# -- the training program --------------------------------------------------------------------


def optimizer(s: PPOSettings) -> optax.GradientTransformation:
    """Adam with the gradient clipped to a global norm."""
    return optax.chain(optax.clip_by_global_norm(s.max_grad_norm), optax.adam(s.lr, eps=1e-8))


def ppo_loss(s: PPOSettings):
    """``loss(params, (obs, actions, old_logp, adv, targets))``: the clipped surrogate, half
    the squared value error, and the entropy bonus, as one scalar."""
    net = ActorCritic(actions=2, hidden=s.hidden)

    def loss_fn(params, mb):
        obs, actions, old_logp, adv, targets = mb
        logits, values = net.apply(params, obs)
        logp_all = jax.nn.log_softmax(logits)
        logp = jnp.take_along_axis(logp_all, actions[:, None], axis=1)[:, 0]
        ratio = jnp.exp(logp - old_logp)
        policy = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - s.clip, 1 + s.clip) * adv).mean()
        vf = 0.5 * jnp.square(values - targets).mean()
        entropy = -(jnp.exp(logp_all) * logp_all).sum(-1).mean()
        return policy + s.vf_coeff * vf - s.entropy_coeff * entropy

    return loss_fn


def make_train(s: PPOSettings, iterations: int):
    """``train(key) -> (params, returns)``: ``iterations`` PPO iterations as one jitted
    function; ``returns[i]`` is the mean return of the episodes that ended in iteration i."""
    net, tx, loss_fn = ActorCritic(actions=2, hidden=s.hidden), optimizer(s), ppo_loss(s)
    batch = s.num_envs * s.horizon
    mb_size = batch // s.minibatches

    def iteration(carry, _):
        params, opt_state, env_states, obs, key = carry

        def act(c, _):
            env_states, obs, key = c
            key, k_act, k_env = jax.random.split(key, 3)
            logits, values = net.apply(params, obs)
            actions = jax.random.categorical(k_act, logits)
            logp = jnp.take_along_axis(jax.nn.log_softmax(logits), actions[:, None], axis=1)[:, 0]
            env_states, next_obs, rewards, terminated, done, ep_ret = jax.vmap(env_step)(
                jax.random.split(k_env, s.num_envs), env_states, actions)
            return (env_states, next_obs, key), (obs, actions, logp, values, rewards, terminated, done, ep_ret)

        (env_states, obs, key), traj = jax.lax.scan(act, (env_states, obs, key), None, s.horizon)
        t_obs, t_actions, t_logp, t_values, t_rewards, t_term, t_done, t_ret = traj
        _, last_value = net.apply(params, obs)

        def gae(c, x):
            next_adv, next_value = c
            value, reward, term, done = x
            delta = reward + s.gamma * next_value * (1.0 - term) - value
            adv = delta + s.gamma * s.gae_lambda * (1.0 - done) * next_adv
            return (adv, value), adv

        _, adv = jax.lax.scan(gae, (jnp.zeros_like(last_value), last_value),
                              (t_values, t_rewards, t_term.astype(jnp.float32), t_done.astype(jnp.float32)),
                              reverse=True)
        targets = adv + t_values
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        flat = jax.tree_util.tree_map(lambda x: x.reshape(batch, *x.shape[2:]),
                                      (t_obs, t_actions, t_logp, adv, targets))

        def epoch(c, _):
            params, opt_state, key = c
            key, k_perm = jax.random.split(key)
            perm = jax.random.permutation(k_perm, batch)
            mbs = jax.tree_util.tree_map(lambda x: x[perm].reshape(s.minibatches, mb_size, *x.shape[1:]), flat)

            def minibatch(c, mb):
                params, opt_state = c
                grads = jax.grad(loss_fn)(params, mb)
                updates, opt_state = tx.update(grads, opt_state, params)
                return (optax.apply_updates(params, updates), opt_state), None

            (params, opt_state), _ = jax.lax.scan(minibatch, (params, opt_state), mbs)
            return (params, opt_state, key), None

        (params, opt_state, key), _ = jax.lax.scan(epoch, (params, opt_state, key), None, s.epochs)
        return (params, opt_state, env_states, obs, key), jnp.nanmean(t_ret)

    def train(key):
        key, k_init, k_env = jax.random.split(key, 3)
        env_states = jax.vmap(env_reset)(jax.random.split(k_env, s.num_envs))
        obs = env_states.physics
        params = net.init(k_init, obs[:1])
        opt_state = tx.init(params)
        carry, returns = jax.lax.scan(iteration, (params, opt_state, env_states, obs, key), None, iterations)
        return carry[0], returns

    return jax.jit(train)


def block(x: Any) -> Any:
    return jax.block_until_ready(x)
