"""Pixel observations: convolutional encoders, and :class:`CNNActorCritic`, the model that
reads images and vectors together.

An observation group whose entries are ``[C, H, W]`` is an image; one whose entries are
``[D]`` is a vector. :class:`CNNActorCritic` gives the actor and the critic each its own
networks: a :class:`ConvEncoder` per image group (flattened), concatenated with the
vector groups, then an MLP. Use it from any config::

    AlgorithmConfig(model_cls=CNNActorCritic,
                    model_config={"hiddens": [64], "cnn": {"output_channels": [16, 32], "kernel_size": 3, "stride": 2}},
                    ...)

The encoder's settings are rsl_rl 5's ``cnn_cfg`` (:class:`ConvEncoder`), so
:mod:`rlx.runners` maps its ``CNNModel`` here. Images are not normalized:
:attr:`CNNActorCritic.raw_obs_keys` tells the policy's observation normalizer to leave
them alone (scale pixels in the env, as rsl_rl expects too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import Tensor, nn
from torchrl.data import Composite, TensorSpec

from rlx.env import ACTION_MASK, group_spec
from rlx.models import _activation, _mlp, _widths, as_model_dtype

__all__ = ["CNNActorCritic", "ConvEncoder", "CNN_KEYS"]

#: The settings of one :class:`ConvEncoder` (rsl_rl 5's ``cnn_cfg``).
CNN_KEYS = ("output_channels", "kernel_size", "stride", "dilation", "padding", "norm", "activation", "max_pool",
            "global_pool", "flatten")
PADDINGS = ("none", "zeros", "reflect", "replicate", "circular")


def _per_layer(value: Any, i: int) -> Any:
    return value[i] if isinstance(value, (list, tuple)) else value


def _same_padding(hw: tuple[int, int], kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """The padding that keeps ``ceil(size / stride)`` outputs per axis."""
    return tuple(math.ceil((stride * math.floor(n / stride) - n - stride + dilation * (kernel - 1) + 1) / 2)
                 for n in hw)  # type: ignore[return-value]


class ConvEncoder(nn.Sequential):
    """Conv2d layers (each followed by an optional norm, the activation and an optional
    3x3 max pool), an optional global pool, flattened: ``[N, C, H, W] -> [N, F]``.

    Args:
        input_shape: ``(C, H, W)`` of one image.
        output_channels: Channels of each conv layer (their number is the depth).
        kernel_size, stride, dilation: One int for every layer, or one per layer.
        padding: ``"none"`` (valid convolutions) or a padding mode (``"zeros"``,
            ``"reflect"``, ``"replicate"``, ``"circular"``) that keeps ``ceil(H / stride)``.
        norm: ``"none"``, ``"batch"`` or ``"layer"``, for every layer or one per layer.
        activation: One of :data:`rlx.models.ACTIVATIONS` (``"leaky_relu"`` and others too).
        max_pool: For every layer or one per layer.
        global_pool: ``"none"``, ``"max"`` or ``"avg"``.
        flatten: Must be True (the latent feeds an MLP); accepted for rsl_rl's cfg.
    """

    def __init__(self, input_shape: Sequence[int], *, output_channels: Sequence[int], kernel_size: Any = 3,
                 stride: Any = 1, dilation: Any = 1, padding: str = "none", norm: Any = "none",
                 activation: str = "elu", max_pool: Any = False, global_pool: str = "none", flatten: bool = True,
                 where: str = "model_config.cnn") -> None:
        super().__init__()
        if len(input_shape) != 3:
            raise ValueError(f"{where}: an image group must be [C, H, W], got {list(input_shape)}")
        widths = _widths(list(output_channels) if isinstance(output_channels, (list, tuple)) else output_channels,
                         allow_empty=False, name=f"{where}.output_channels".removeprefix("model_config."))
        if padding not in PADDINGS:
            raise ValueError(f"{where}.padding: {padding!r} is not one of {list(PADDINGS)}")
        if global_pool not in ("none", "max", "avg"):
            raise ValueError(f"{where}.global_pool: {global_pool!r} is not one of ['none', 'max', 'avg']")
        if not flatten:
            raise ValueError(f"{where}.flatten: must be True (the encoder's latent feeds an MLP)")
        act = _activation(activation)
        channels, hw = int(input_shape[0]), (int(input_shape[1]), int(input_shape[2]))
        for i, out in enumerate(widths):
            k, s, d = int(_per_layer(kernel_size, i)), int(_per_layer(stride, i)), int(_per_layer(dilation, i))
            pad = _same_padding(hw, k, s, d) if padding != "none" else (0, 0)
            conv = nn.Conv2d(channels, out, k, stride=s, padding=pad, dilation=d,
                             padding_mode=padding if padding != "none" else "zeros")
            nn.init.kaiming_normal_(conv.weight)
            nn.init.zeros_(conv.bias)
            self.append(conv)
            hw = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1 for n, p in zip(hw, pad))  # type: ignore[assignment]
            if min(hw) < 1:
                raise ValueError(f"{where}: layer {i} leaves no pixels of a {list(input_shape)} image")
            kind = _per_layer(norm, i)
            if kind == "batch":
                self.append(nn.BatchNorm2d(out))
            elif kind == "layer":
                self.append(nn.LayerNorm([out, *hw]))
            elif kind != "none":
                raise ValueError(f"{where}.norm: {kind!r} is not one of ['none', 'batch', 'layer']")
            self.append(act())
            if _per_layer(max_pool, i):
                self.append(nn.MaxPool2d(3, stride=2, padding=1))
                hw = tuple((n - 1) // 2 + 1 for n in hw)  # type: ignore[assignment]
            channels = out
        if global_pool != "none":
            self.append(nn.AdaptiveMaxPool2d(1) if global_pool == "max" else nn.AdaptiveAvgPool2d(1))
            hw = (1, 1)
        self.append(nn.Flatten(start_dim=1))
        #: ``F``: features of one encoded image.
        self.output_dim = channels * hw[0] * hw[1]

    def forward(self, x: Tensor) -> Tensor:
        """``[N, C, H, W]`` images (any float dtype; cast to the weights') to ``[N, F]``."""
        return super().forward(x.to(self[0].weight.dtype))


def _groups(spec: TensorSpec, keys: list[str] | None, where: str) -> tuple[list[str], list[str]]:
    """The image keys (``[C, H, W]``) and the vector keys (``[D]``) of a group, sorted."""
    if not isinstance(spec, Composite):
        raise ValueError(f"{where}: CNNActorCritic needs a Composite observation of image and vector groups, got "
                         f"{type(spec).__name__}{list(spec.shape)}")
    images, vectors = [], []
    for key in sorted(keys if keys is not None else spec.keys()):
        if key == ACTION_MASK:
            continue
        sub = spec[key]
        if isinstance(sub, Composite) or len(sub.shape) not in (1, 3):
            raise ValueError(f"{where}: observation {key!r} is {list(getattr(sub, 'shape', []))}; CNNActorCritic reads "
                             "[C, H, W] images and [D] vectors")
        (images if len(sub.shape) == 3 else vectors).append(key)
    if not images:
        raise ValueError(f"{where}: no [C, H, W] image among {sorted(keys or spec.keys())}; use the MLP model")
    return images, vectors


class _Tower(nn.Module):
    """One network of :class:`CNNActorCritic`: encoders, then the MLP."""

    def __init__(self, spec: Composite, keys: list[str] | None, hiddens: list[int], out: int, out_gain: float,
                 activation: str, cnn: dict[str, dict[str, Any]], shared: nn.ModuleDict | None, where: str) -> None:
        super().__init__()
        self.images, self.vectors = _groups(spec, keys, where)
        if shared is not None:
            self.cnns = shared
        else:
            self.cnns = nn.ModuleDict({k: ConvEncoder(spec[k].shape, where=f"model_config.cnn[{k!r}]",
                                                      **{"activation": activation, **cnn[k]}) for k in self.images})
        width = sum(self.cnns[k].output_dim for k in self.images) + sum(math.prod(spec[k].shape) for k in self.vectors)
        self.mlp = _mlp([width, *hiddens, out], _activation(activation), out_gain=out_gain, head=True)

    def forward(self, obs: TensorDictBase) -> Tensor:
        n = obs.batch_size[0]
        parts = [obs.get(k).reshape(n, -1).float() for k in self.vectors]
        parts += [self.cnns[k](obs.get(k)) for k in self.images]
        return self.mlp(as_model_dtype(self.mlp, torch.cat(parts, dim=-1)))


class CNNActorCritic(nn.Module):
    """Separate actor and critic, each convolutional encoders over its image groups,
    concatenated with its vector groups, then an MLP (see the module docstring).

    Args:
        observation_spec: A Composite of ``[C, H, W]`` images and ``[D]`` vectors.
        action_spec: Spec of one env's action (used only through ``num_params``).
        num_params: ``(S, I)`` from the distribution's ``param_layout``.
        hiddens: The actor MLP's hidden widths (and the critic's without ``critic_hiddens``).
        critic_hiddens: The critic MLP's hidden widths.
        activation_fn: The MLPs' and the encoders' activation.
        log_std_init: Initial value of the state-independent parameters.
        cnn: :class:`ConvEncoder`'s settings, for every image group, or
            ``{group: settings}`` per group.
        share_encoders: The critic reuses the actor's encoders (both must read the same
            images); their gradients then come from both losses.
        obs_groups: ``{"actor": [keys], "critic": [keys]}`` (a missing group reads every key).
    """

    def __init__(self, observation_spec: TensorSpec, action_spec: TensorSpec, /, *, num_params: tuple[int, int],
                 hiddens: Sequence[int] = (256, 256), critic_hiddens: Sequence[int] | None = None,
                 activation_fn: str = "elu", log_std_init: float = 0.0, cnn: dict[str, Any] | None = None,
                 share_encoders: bool = False, obs_groups: dict[str, list[str]] | None = None) -> None:
        super().__init__()
        groups = obs_groups or {}
        actor_images, _ = _groups(observation_spec, groups.get("actor"), "model_config (actor)")
        critic_images, _ = _groups(observation_spec, groups.get("critic"), "model_config (critic)")
        if not isinstance(cnn, dict) or not cnn:
            raise ValueError(f"model_config.cnn: the encoders' settings are needed ({list(CNN_KEYS)}), got {cnn!r}")
        per_group = all(isinstance(v, dict) for v in cnn.values())
        images = sorted({*actor_images, *critic_images})
        settings = {k: dict(cnn[k]) if per_group else dict(cnn) for k in images if not per_group or k in cnn}
        missing = sorted(set(images) - set(settings))
        if missing:
            raise ValueError(f"model_config.cnn: no settings for image group(s) {missing} (has {sorted(cnn)})")
        for k, s in settings.items():
            for key in sorted(set(s) - set(CNN_KEYS)):
                raise ValueError(f"model_config.cnn[{k!r}]: unknown setting {key!r} (one of {list(CNN_KEYS)})")
        if share_encoders and actor_images != critic_images:
            raise ValueError(f"model_config.share_encoders: the actor reads images {actor_images}, the critic "
                             f"{critic_images}; shared encoders need the same")
        hiddens = _widths(hiddens, allow_empty=False)
        critic_widths = hiddens if critic_hiddens is None else _widths(critic_hiddens, allow_empty=False,
                                                                       name="critic_hiddens")
        self.observation_spec = observation_spec
        self.actor_spec = group_spec(observation_spec, groups.get("actor"))
        self.critic_spec = group_spec(observation_spec, groups.get("critic"))
        num_dependent, num_independent = num_params
        self.actor = _Tower(observation_spec, groups.get("actor"), hiddens, num_dependent, 0.01, activation_fn,
                            settings, None, "model_config (actor)")
        self.critic = _Tower(observation_spec, groups.get("critic"), critic_widths, 1, 1.0, activation_fn, settings,
                             self.actor.cnns if share_encoders else None, "model_config (critic)")
        self.share_encoders = bool(share_encoders)
        self.log_std = nn.Parameter(torch.full((num_independent,), float(log_std_init))) if num_independent else None
        #: Observation keys the policy's normalizer leaves alone: the images.
        self.raw_obs_keys = images

    def dist_params(self, obs: TensorDictBase) -> Tensor:
        """Actor only: ``[N, S + I]``."""
        head = self.actor(obs)
        if self.log_std is None:
            return head
        return torch.cat([head, self.log_std.to(head.dtype).expand(head.shape[0], -1)], dim=-1)

    def value(self, obs: TensorDictBase) -> Tensor:
        """Critic only: ``[N, 1]``."""
        return self.critic(obs)

    def forward(self, obs: TensorDictBase) -> tuple[Tensor, Tensor]:
        """``(dist_params [N, S + I], values [N, 1])``."""
        return self.dist_params(obs), self.value(obs)

    def actor_parameters(self) -> list[nn.Parameter]:
        """The actor's parameters (shared encoders included)."""
        return list(self.actor.parameters()) + ([self.log_std] if self.log_std is not None else [])

    def critic_parameters(self) -> list[nn.Parameter]:
        """The critic's parameters (shared encoders excluded: they are the actor's)."""
        shared = {id(p) for p in self.actor.cnns.parameters()} if self.share_encoders else set()
        return [p for p in self.critic.parameters() if id(p) not in shared]
