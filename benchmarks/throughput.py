"""Throughput of rlx's collect() and step() over a grid of batch sizes, envs and algorithms.

    python benchmarks/throughput.py [--quick] [--device cpu|cuda] [--num-envs 64 1024 ...]
        [--horizon 32] [--algos ppo npg recurrent_ppo] [--envs CartPole Pendulum DiscreteDummyEnv]
        [--hiddens 64 64] [--amp] [--iters 5] [--threads 2]

For each grid point it builds the algorithm, runs warm-up iterations, then times
``collect()`` and ``step()`` separately (synchronising CUDA before every clock read) over
``--iters`` iterations and reports medians:

* collect env-steps/s (B·T / collect time);
* update samples/s (N · epochs / step time; NPG counts one pass);
* end-to-end env-steps/s (B·T / (collect + step));
* peak memory: CUDA max allocated, or the process's peak RSS on CPU.

``recurrent_ppo`` is PPO with the default LSTM policy sized like the MLP: an encoder of
``hiddens[:-1]`` (or ``hiddens[0]`` for one layer) and an LSTM of ``hiddens[-1]`` units,
trained on sequences of 16 steps (or T when shorter), next to the feedforward rows.

Results are appended as JSON lines to ``benchmarks/results/throughput_<device>.jsonl``
and written as a markdown table to ``benchmarks/results/throughput_<device>.md`` (``--tag``
adds a suffix to both names), with the
torch version, device name, thread count and git commit. ``--quick`` runs a small grid in
well under a minute on a CPU.
"""

from rlx.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
