"""Accuracy and timing tools (issue 7): nothing here is active until started.

- ApiTimer: time every torch API call (torch.*, F.*, Tensor methods, module forwards); summary, CSV, compare.
- OverflowCheck / NonFiniteError: stop at the N-th API that produces inf/nan, naming the API and the line.
"""
from .api_timer import ApiStat, ApiTimer
from .overflow import Hit, NonFiniteError, OverflowCheck, tensor_stats

__all__ = ["ApiStat", "ApiTimer", "Hit", "NonFiniteError", "OverflowCheck", "tensor_stats"]
