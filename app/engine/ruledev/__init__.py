"""Tools for writing rules, never on the runtime path: fixture tests (ruletest), corpus scoring
(evaluation), mutation of match fixtures (mutate), synthetic logs (synthetic), the rule catalogue
(catalog) and pattern export (export). They drive ``app.engine.pipeline`` like any caller.

Submodules are imported on use, never here.
"""

__all__ = ["catalog", "evaluation", "export", "mutate", "ruletest", "synthetic"]
