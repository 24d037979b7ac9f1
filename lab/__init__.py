"""The graph-mode inference lab: what eager PyTorch, CUDA graph replay and torch.compile do to a decode step."""

__version__ = "0.1.0"
