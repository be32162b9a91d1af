"""The throughput benchmark: the same as ``rlx bench`` (see :mod:`rlx.bench` for the grid,
the switches and the results files).

    python benchmarks/throughput.py [--quick] [--device cuda] [--compile] [--cudagraphs] [...]
"""

from rlx.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
