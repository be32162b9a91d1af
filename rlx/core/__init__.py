"""The leaves: tensors in, tensors out, nothing above them imported.

GAE, action distributions, running normalizers, schedules, natural-gradient pieces,
statistics by name, the marked host syncs, the CUDA-graph rule, torch.distributed
helpers, seed statistics, config field checks and YAML typing.
"""
