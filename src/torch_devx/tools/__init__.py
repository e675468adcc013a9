"""Accuracy and timing tools (issue 7): nothing here is active until started, and importing
torch_devx does not import this package.

- ApiTimer: time every torch API call (torch.*, F.*, Tensor methods, module forwards); summary, CSV, compare.
- OverflowCheck / NonFiniteError: stop at the N-th API that produces inf/nan, naming the API and the line.
- Dumper / seed_all: dump each API's (module's, aten op's) inputs and outputs, forward and backward,
  as statistics or data, per step.
- compare / parse: compare two dumps (CSV, HTML, first divergence, layer ranking); show one record.
- Tracer: dump chosen modules and functions, chosen by a YAML file.
- DivergenceFinder / run_script: run every devx op on the CPU too; the first op that differs, with a repro.
"""
from .api_timer import ApiStat, ApiTimer
from .compare import CompareResult, compare, parse
from .divergence import Divergence, DivergenceError, DivergenceFinder, run_script
from .dump import Dumper, seed_all
from .overflow import Hit, NonFiniteError, OverflowCheck, tensor_stats
from .tracer import Tracer

__all__ = ["ApiStat", "ApiTimer", "CompareResult", "Divergence", "DivergenceError", "DivergenceFinder", "Dumper",
           "Hit", "NonFiniteError", "OverflowCheck", "Tracer", "compare", "parse", "run_script", "seed_all",
           "tensor_stats"]
