"""FX passes that put the convops ops into the graphs torch.compile captures. One module per pattern; see
pass_manager.PASSES for the order they run in and backend.py for where they run (the Dynamo graph, before
AOTAutograd, so every spelling, every hyper-parameter and training are covered by one matcher per pattern)."""
from .pass_manager import PASS_NAMES, PASSES, PassManager
from .report import Decline, GraphReport, Report

__all__ = ["PASSES", "PASS_NAMES", "PassManager", "Decline", "GraphReport", "Report"]
