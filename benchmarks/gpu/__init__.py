"""The parts of ``benchmarks/gpu_suite.py``: what it measures and at which sizes
(:mod:`gpu.settings`), the measurements (:mod:`gpu.measure`), the pytest part and its
plugin (:mod:`gpu.pytest_part`), the suite that runs them (:mod:`gpu.suite`) and the
report (:mod:`gpu.report`)."""
