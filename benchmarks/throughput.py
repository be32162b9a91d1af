"""The throughput benchmark: the same as ``rlx bench`` (see :mod:`rlx.run.bench` for the grid,
the switches and the results files).

    python benchmarks/throughput.py [--quick] [--device cuda] [--compile] [--cudagraphs] [...]
"""

from rlx.run.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
