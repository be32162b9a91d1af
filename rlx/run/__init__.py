"""Running training: the :class:`~rlx.run.trainer.Trainer` loop, stop conditions,
checkpoints, export and deployment, plots, throughput benchmarks, CPU threads and the
``rlx`` command."""
